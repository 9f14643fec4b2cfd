// collect_outputs and the transfer tally. The phase order is documented in outputs.hpp; the
// comments here say why each phase sits where it does.
#include "airlock/outputs.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "airlock/errors.hpp"
#include "core/outputs/artifact_names_detail.hpp"

namespace airlock {
namespace {

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a > std::numeric_limits<std::uint64_t>::max() - b
             ? std::numeric_limits<std::uint64_t>::max()
             : a + b;
}

// Runs one stat or read and translates what the backend raised into the outputs family. Only
// two translations exist: an escape is "not confined", an OS-level failure is "unreachable".
// Anything else keeps its type, so a provider's own failure is never dressed up as a path
// problem (and a cap already raised by the backend stays a cap).
template <typename Operation>
auto translated(const std::string& path, const char* verb, Operation&& operation)
    -> decltype(operation()) {
  try {
    return operation();
  } catch (const ConfinementError& escape) {
    throw OutputNotConfined("declared output " + detail::printable_name(path) +
                                " is not confined to the work directory: " + escape.message(),
                            "confinement");
  } catch (const SystemError& failure) {
    throw OutputUnreachable("declared output " + detail::printable_name(path) + " could not be " +
                                verb + ": " + failure.message(),
                            failure.type());
  }
}

struct PlannedOutput {
  const DeclaredOutput* output;
  std::string delivered;  // the landing spelling; empty for `consume`
};

// Two landing outputs that would land as one file. Both declared paths are named — the
// delivered spelling alone can be the same string twice — and the message says whether the
// delivered names are identical or differ only by case or Unicode form.
ArtifactNameCollision collision(const PlannedOutput& earlier, const PlannedOutput& later) {
  const bool identical = earlier.delivered == later.delivered;
  const std::string outputs = "declared outputs " + detail::printable_name(earlier.output->path) +
                              " and " + detail::printable_name(later.output->path) +
                              " would land as one file: ";
  if (identical) {
    return ArtifactNameCollision(
        outputs + "both are delivered as " + detail::printable_name(later.delivered), "identical");
  }
  return ArtifactNameCollision(
      outputs + "their delivered names " + detail::printable_name(earlier.delivered) + " and " +
          detail::printable_name(later.delivered) + " differ only by case or Unicode form",
      "case-or-unicode-form");
}

}  // namespace

// ---- the tally -------------------------------------------------------------------------------

TransferTally::TransferTally(TransferLimits limits, std::string direction)
    : limits_(limits), direction_(std::move(direction)) {}

void TransferTally::add(std::string_view file, std::uint64_t size) {
  const std::string name(file);
  if (size > limits_.max_bytes_per_file) {
    throw TransferCapExceeded(direction_ + ".max_bytes_per_file", name, limits_.max_bytes_per_file,
                              size);
  }
  ++files_;
  if (files_ > limits_.max_files) {
    throw TransferCapExceeded(direction_ + ".max_files", name, limits_.max_files, files_);
  }
  total_ = saturating_add(total_, size);
  if (total_ > limits_.max_total_bytes) {
    throw TransferCapExceeded(direction_ + ".max_total_bytes", name, limits_.max_total_bytes,
                              total_);
  }
}

std::uint64_t TransferTally::remaining_bytes() const noexcept {
  return total_ >= limits_.max_total_bytes ? 0 : limits_.max_total_bytes - total_;
}

// ---- helpers ---------------------------------------------------------------------------------

std::vector<DeclaredOutput> landing_outputs(const SandboxSpec& spec) {
  std::vector<DeclaredOutput> landing;
  for (const auto& output : spec.declared_outputs()) {
    if (output.disposition == OutputDisposition::land) landing.push_back(output);
  }
  return landing;
}

bool spec_lands_artifacts(const SandboxSpec& spec) {
  return spec.outputs_named_at_call_time() || !landing_outputs(spec).empty();
}

OutputSinkRequired missing_sink_refusal(const SandboxSpec& spec,
                                        const std::vector<DeclaredOutput>& landing,
                                        std::string_view asked_by) {
  // Every landing output is named by its path (and its landing name when that differs), up to
  // a bound: a spec with hundreds of outputs must not make a message of hundreds of lines.
  constexpr std::size_t kNamed = 5;
  std::string names;
  for (std::size_t i = 0; i < landing.size() && i < kNamed; ++i) {
    names += (i == 0 ? "" : ", ") + detail::printable_name(landing[i].path);
    if (landing[i].name && *landing[i].name != landing[i].path) {
      names += " (as " + detail::printable_name(*landing[i].name) + ")";
    }
  }
  if (landing.size() > kNamed) names += " and " + std::to_string(landing.size() - kNamed) + " more";
  std::string what;
  if (!landing.empty()) what = "lands " + names;
  if (spec.outputs_named_at_call_time()) {
    what += std::string(what.empty() ? "lands" : " and") + " outputs named at call time";
  }
  if (what.empty()) what = "lands nothing";  // a caller asked without cause; still say so
  return OutputSinkRequired("the '" + spec.kind() + "' workload " + what + ", but " +
                                std::string(asked_by) +
                                " has no output sink to deliver them to; wire a sink (e.g. "
                                "make_file_system_sink) or declare the outputs 'consume'",
                            "sink");
}

// ---- collect_outputs -------------------------------------------------------------------------

std::vector<LandedArtifact> collect_outputs(Sandbox& sandbox, const SandboxSpec& spec,
                                            const OutputSink* sink,
                                            std::vector<DeclaredOutput> call_time_outputs) {
  // Phase 0: a call-time name is an obligation the spec must have taken on (a sink, FILES_OUT,
  // the confidentiality review), not something a caller can add on the way out.
  if (!call_time_outputs.empty() && !spec.outputs_named_at_call_time()) {
    throw InvalidArgument("collect_outputs: " + std::to_string(call_time_outputs.size()) +
                              " output(s) were named at call time, but the '" + spec.kind() +
                              "' spec does not set outputs_named_at_call_time",
                          "outputs_named_at_call_time");
  }

  // Phase 1: one list, one set of caps — call-time outputs share the spec's budget.
  std::vector<DeclaredOutput> declared = spec.declared_outputs();
  declared.insert(declared.end(), std::make_move_iterator(call_time_outputs.begin()),
                  std::make_move_iterator(call_time_outputs.end()));
  std::vector<DeclaredOutput> landing;
  for (const auto& output : declared) {
    if (output.disposition == OutputDisposition::land) landing.push_back(output);
  }
  const bool have_sink = sink != nullptr && static_cast<bool>(sink->deliver);
  if (!landing.empty() && !have_sink) throw missing_sink_refusal(spec, landing, "collect_outputs");

  // Phase 2: names, judged before the sandbox is touched, so a bad declaration costs nothing
  // and leaves nothing half-done.
  const bool compose = have_sink && sink->normalization == NameNormalization::nfc;
  std::vector<PlannedOutput> planned;
  planned.reserve(declared.size());
  std::map<std::string, std::size_t> keys;  // collision key → index into `planned`
  for (const auto& output : declared) {
    validate_artifact_name(output.path);
    PlannedOutput plan{&output, {}};
    if (output.disposition == OutputDisposition::land) {
      const std::string& written = output.delivered_name();
      plan.delivered = compose ? nfc_compose(written) : written;
      if (plan.delivered != output.path) validate_artifact_name(plan.delivered);
      const std::string key = artifact_collision_key(plan.delivered);
      if (auto [found, inserted] = keys.emplace(key, planned.size()); !inserted) {
        throw collision(planned[found->second], plan);
      }
    }
    planned.push_back(std::move(plan));
  }

  // Phase 3: stat everything — `consume` included — against the caps before reading anything,
  // so a collection over budget is refused before a single byte crosses.
  const std::string& work_dir = spec.work_dir();
  TransferTally stat_tally(spec.files_out(), "files_out");
  struct ToRead {
    const PlannedOutput* plan;
    std::uint64_t size;
  };
  std::vector<ToRead> to_read;
  for (const auto& plan : planned) {
    const DeclaredOutput& output = *plan.output;
    const auto entry = translated(output.path, "stat-ed",
                                  [&] { return sandbox.stat_file(output.path, work_dir); });
    if (!entry) {
      if (output.required) {
        throw OutputMissing("declared output " + detail::printable_name(output.path) +
                                " is missing, and it is required",
                            "required");
      }
      continue;  // an optional output's absence is a normal outcome, and costs nothing
    }
    if (entry->kind != EntryKind::file) {
      throw OutputNotRegular("declared output " + detail::printable_name(output.path) + " is a " +
                                 std::string(to_string(entry->kind)) +
                                 ", not a regular file; only regular files are collected",
                             std::string(to_string(entry->kind)));
    }
    if (!entry->size_bytes) {
      throw OutputSizeUnknown("declared output " + detail::printable_name(output.path) +
                                  " has no known size; an unknown size is never read as free",
                              "size");
    }
    stat_tally.add(output.path, *entry->size_bytes);
    if (output.disposition == OutputDisposition::land)
      to_read.push_back({&plan, *entry->size_bytes});
  }

  // Phase 4.
  if (to_read.empty()) return {};

  // Phase 5: each read is bounded by what the stat promised and by what the total has left;
  // the bytes that actually arrived are counted again, because a file can grow after its stat
  // and a backend can return more than it was asked for.
  TransferTally read_tally(spec.files_out(), "files_out");
  std::vector<Artifact> artifacts;
  artifacts.reserve(to_read.size());
  for (const auto& [plan, size] : to_read) {
    const DeclaredOutput& output = *plan->output;
    const std::uint64_t bound = std::min(size, read_tally.remaining_bytes());
    std::string content = translated(
        output.path, "read", [&] { return sandbox.read_file(output.path, work_dir, bound); });
    read_tally.add(output.path, content.size());
    artifacts.push_back(
        Artifact{plan->delivered, std::move(content), spec.kind(), output.media_type});
  }

  // Phase 6: only now does anything leave.
  std::vector<LandedArtifact> landed;
  landed.reserve(artifacts.size());
  for (const auto& artifact : artifacts) landed.push_back(sink->deliver(artifact));
  return landed;
}

}  // namespace airlock
