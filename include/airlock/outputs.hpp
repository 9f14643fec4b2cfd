// Declared outputs: what a workload promised to leave behind, pulled out under caps and handed
// to the host's sink.
//
// `collect_outputs` runs in phases, and **the phase order is the contract**: nothing is
// delivered until every output has been validated, stat-ed, capped and read, because a partial
// artifact set is worse than none.
//
//   0. call-time outputs are refused (InvalidArgument) unless spec.outputs_named_at_call_time;
//   1. declared = spec.declared_outputs + call-time outputs (sharing one set of caps); if any
//      of them lands (`land`) and there is no sink → OutputSinkRequired;
//   2. names, before the sandbox is touched: every declared path passes
//      `validate_artifact_name`; each landing output's delivered spelling (its `name`, or its
//      path, NFC-composed unless the sink says `none`) passes too; two landing outputs whose
//      collision keys match → ArtifactNameCollision, naming both declared paths and whether the
//      delivered names are identical or differ only by case or Unicode form;
//   3. stat, in declaration order, with a tally over spec.files_out: absent and required →
//      OutputMissing (absent and optional → skipped, uncounted); not a regular file →
//      OutputNotRegular; no size → OutputSizeUnknown; every present output — `consume`
//      included — is counted against the caps (TransferCapExceeded names the cap and the file);
//   4. nothing lands → return {};
//   5. read the landing outputs with a fresh tally, each under min(stat size, bytes the total
//      cap has left), and count again the bytes that actually arrived (a file can grow between
//      stat and read, and a backend can lie);
//   6. deliver in order. A sink that refuses part-way leaves the earlier deliveries standing
//      and its error propagates — the only way to get a partial landing.
//
// Backend errors met while stat-ing and reading are translated: a ConfinementError (an escape,
// a link) becomes OutputNotConfined; any SystemError (not found, not a directory, a timeout,
// …) becomes OutputUnreachable; everything else — the outputs family itself, BackendError,
// NotSupported, a plain InvalidArgument — passes through unchanged, so a provider's own failure
// is never misreported as a path problem.
//
// `consume` outputs are stat-ed and counted but never read here: the kind reads them itself and
// owns that bound.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/errors.hpp"
#include "airlock/records.hpp"
#include "airlock/sandbox.hpp"

namespace airlock {

// The longest artifact name, in UTF-8 bytes of its *delivered* spelling.
inline constexpr std::size_t kMaxArtifactNameBytes = 255;

// Where landing artifacts go. `deliver` refuses by throwing (an OutputError such as
// LandingNotConfined, or any other Error) — never by a flag or a silent drop. It returns where
// the artifact landed; `display` is the only part a model may see. A sink carries no
// confidentiality cap: deciding what may leave is the host's, before it wires a sink at all.
struct OutputSink {
  std::function<LandedArtifact(const Artifact&)> deliver;
  // nfc (default): names are delivered NFC-composed. none: byte-exact — the name rules and
  // the collision check still apply, and collisions are still judged on NFC-lowercased keys.
  NameNormalization normalization = NameNormalization::nfc;
};

// Pull `spec`'s declared outputs (plus `call_time_outputs`) out of `sandbox` and hand the
// landing ones to `sink`, in the phase order above. `sink` may be null only when nothing lands.
// Returns one LandedArtifact per delivered output, in declaration order.
std::vector<LandedArtifact> collect_outputs(Sandbox& sandbox, const SandboxSpec& spec,
                                            const OutputSink* sink,
                                            std::vector<DeclaredOutput> call_time_outputs = {});

// The `land` subset of spec.declared_outputs.
std::vector<DeclaredOutput> landing_outputs(const SandboxSpec& spec);
// Whether the spec lands anything: a `land` declared output, or outputs_named_at_call_time.
bool spec_lands_artifacts(const SandboxSpec& spec);
// The OutputSinkRequired a caller (`asked_by`, e.g. "collect_outputs") raises when `landing`
// is non-empty (or the spec names outputs at call time) and there is no sink — returned, not
// thrown, so every caller shares one wording. It names the landing outputs by path (the first
// five, then "and N more") and says when outputs are named at call time.
OutputSinkRequired missing_sink_refusal(const SandboxSpec& spec,
                                        const std::vector<DeclaredOutput>& landing,
                                        std::string_view asked_by);

// ---- the caps ------------------------------------------------------------------------------

// One collection's running count against a TransferLimits. `add` checks, in this order: the
// per-file cap, then the file count, then the total — and throws TransferCapExceeded naming
// "<direction>.max_bytes_per_file" / ".max_files" / ".max_total_bytes" and the file.
class TransferTally {
 public:
  explicit TransferTally(TransferLimits limits, std::string direction = "files_out");

  void add(std::string_view file, std::uint64_t size);
  // max(max_total_bytes − counted, 0).
  std::uint64_t remaining_bytes() const noexcept;
  std::uint64_t files() const noexcept { return files_; }
  std::uint64_t total_bytes() const noexcept { return total_; }

 private:
  TransferLimits limits_;
  std::string direction_;
  std::uint64_t files_ = 0;
  std::uint64_t total_ = 0;
};

// ---- artifact names ------------------------------------------------------------------------

// The narrow name invariant, checked in this order; the first broken rule is named in the
// ArtifactNameInvalid (its `check()` is the rule: "empty", "backslash", "absolute",
// "parent-segment", "empty-segment", "control-character", "utf8", "length"):
//   1. empty; 2. contains `\`; 3. starts with `/`; 4. a segment is `..`; 5. a segment is empty
//   or `.` (`a//b`, `a/./b`, a trailing `/`, a leading `./`); 6. any ASCII 0–31 (DEL is
//   allowed); 7. not valid UTF-8 (including encoded surrogates and overlongs); 8. more than
//   kMaxArtifactNameBytes bytes.
// Nothing further: whether the name is legal at the destination is the host's business (see
// `portable_name`). Apply it to the *delivered* spelling — NFC can lengthen a name (85 × U+0958
// is 255 bytes decomposed and 510 composed).
void validate_artifact_name(std::string_view name);

// Rule 7 alone: ArtifactNameInvalid (rule "utf8") unless `name` is valid UTF-8. For a name
// crossing into a record before collect_outputs judges the whole invariant (a DeclaredOutput
// built by a Python host from a str holding a lone surrogate): no record carries bytes that no
// text can hold.
void validate_artifact_name_encoding(std::string_view name);

// NFC composition (utf8proc). Throws ArtifactNameInvalid (rule "utf8") on invalid UTF-8.
std::string nfc_compose(std::string_view name);

// The key two landing names collide on: posix_normpath(lowercase(NFC(name))), lowercase taken
// per code point (utf8proc_tolower) — deliberately *not* case folding, so "ß" ≠ "ss" and
// "ﬁ" ≠ "fi", as on the case-insensitive file systems that actually merge names.
std::string artifact_collision_key(std::string_view name);

// An opt-in rewrite for hosts landing on Windows-legal storage; never applied automatically.
// Per `/`-separated segment: ASCII 0–31 and `<>:"|?*` become `_`; trailing `.` and space are
// stripped; a stem (up to the first `.`) that is a reserved device name (CON PRN AUX NUL,
// COM1–9, LPT1–9, COM¹²³, LPT¹²³; compared uppercased) gets `_` appended; an empty segment
// becomes `_`. Nothing beyond Microsoft's documented set (`COM⁴` is legal). Invalid UTF-8 is
// refused (ArtifactNameInvalid, rule "utf8"): the rewrite is per character.
std::string portable_name(std::string_view name);

}  // namespace airlock
