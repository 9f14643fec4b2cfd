#include "kinds/codeact/format.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"

namespace airlock::kinds::codeact {
namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> previous(b.size() + 1);
  std::vector<std::size_t> current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string basename_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string seconds_text(Milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

std::string format_result(const ExecResult& result, std::uint64_t shown_cap) {
  std::string out;
  const std::string stdout_text = result.stdout_text();
  const std::string stderr_text = result.stderr_text();
  if (!stdout_text.empty()) out += "stdout:\n" + stdout_text;
  if (!stderr_text.empty()) {
    if (!out.empty() && out.back() != '\n') out += "\n";
    out += "stderr:\n" + stderr_text;
  }
  if (result.truncated) {
    if (!out.empty() && out.back() != '\n') out += "\n";
    out += "[the output was cut at " + std::to_string(shown_cap) +
           " bytes; print less, or write it to a file]\n";
  }
  if (result.exit_code != 0) {
    if (!out.empty() && out.back() != '\n') out += "\n";
    out += "exit code: " + std::to_string(result.exit_code);
  }
  if (out.empty()) {
    return "The program ran and printed nothing. Print the values you need to see.";
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string not_in_store(const std::string& name, const std::vector<std::string>& listing) {
  const std::string wanted = ascii_lower(name);
  const std::string wanted_base = ascii_lower(basename_of(name));
  std::vector<std::pair<std::size_t, std::string>> near;
  for (const auto& candidate : listing) {
    const std::string lower = ascii_lower(candidate);
    const std::size_t distance = edit_distance(wanted, lower);
    if (distance <= std::max<std::size_t>(2, wanted.size() / 4) ||
        ascii_lower(basename_of(candidate)) == wanted_base) {
      near.emplace_back(distance, candidate);
    }
  }
  std::sort(near.begin(), near.end());
  std::string out = "Error: '" + name + "' is not in the file store";
  if (near.empty()) return out + ".";
  out += ". Did you mean:";
  for (std::size_t i = 0; i < near.size() && i < 20; ++i) out += " '" + near[i].second + "'";
  return out + "?";
}

Manifest read_manifest(Sandbox& sandbox, const std::string& path, const std::string& work_dir,
                       const TransferLimits& files_out) {
  Manifest manifest;
  const std::uint64_t cap =
      std::min({kManifestCap, files_out.max_bytes_per_file, files_out.max_total_bytes});
  std::string text;
  try {
    auto entry = sandbox.stat_file(path, work_dir);
    if (!entry) {
      manifest.error = "Note: the program wrote no outputs.json, so nothing was saved.";
      return manifest;
    }
    if (entry->kind != EntryKind::file || !entry->size_bytes) {
      manifest.error = "Error: outputs.json is not a regular file, so nothing was saved.";
      return manifest;
    }
    if (*entry->size_bytes > cap) {
      manifest.error = "Error: outputs.json is larger than " + std::to_string(cap) +
                       " bytes, so nothing was saved.";
      return manifest;
    }
    text = sandbox.read_file(path, work_dir, cap);
  } catch (const std::exception& error) {
    // The kind answers every failure of its own with a sentence; only our messages are shown.
    const auto* ours = dynamic_cast<const Error*>(&error);
    manifest.error = "Error: outputs.json could not be read: " +
                     (ours ? ours->message() : std::string("the sandbox did not answer"));
    return manifest;
  }
  manifest.bytes = text.size();
  json::Json parsed;
  try {
    parsed = json::parse_text(text, "outputs.json");
  } catch (const InvalidArgument&) {
    manifest.error =
        "Error: outputs.json is not valid JSON; write {\"outputs\": [{\"path\": "
        "\"name\"}]}.";
    return manifest;
  }
  const auto outputs = parsed.is_object() ? parsed.find("outputs") : parsed.end();
  if (!parsed.is_object() || outputs == parsed.end() || !outputs->is_array() ||
      parsed.size() != 1) {
    manifest.error = "Error: outputs.json must be {\"outputs\": [{\"path\": \"name\"}, …]}.";
    return manifest;
  }
  for (const auto& item : *outputs) {
    if (!item.is_object() || item.size() != 1 || !item.contains("path") ||
        !item["path"].is_string()) {
      manifest.error = "Error: each entry of outputs.json must be {\"path\": \"name\"}.";
      return manifest;
    }
    manifest.names.push_back(item["path"].get<std::string>());
  }
  if (manifest.names.size() + 1 > files_out.max_files) {
    manifest.error = "Error: outputs.json names more outputs than can be saved (" +
                     std::to_string(files_out.max_files - 1) + ").";
    manifest.names.clear();
  }
  return manifest;
}

std::string saved_lines(const std::vector<LandedArtifact>& landed,
                        const std::vector<std::string>& names) {
  std::string out;
  std::set<std::string> delivered;
  if (!landed.empty()) {
    out += "Saved:";
    for (const auto& artifact : landed) {
      out += "\n- " + artifact.display;
      delivered.insert(artifact.name);
    }
  }
  std::string missing;
  for (const auto& name : names) {
    if (!delivered.contains(name) && !delivered.contains(nfc_compose(name))) {
      missing += (missing.empty() ? "" : ", ") + name;
    }
  }
  if (!missing.empty()) out += std::string(out.empty() ? "" : "\n") + "Not written: " + missing;
  return out;
}

std::string tool_description(const ToolOptions& options, const SandboxSpec& spec,
                             const std::shared_ptr<const HostToolRegistry>& registry) {
  std::string text =
      "Run a Python program in an isolated sandbox and return what it prints (stdout, stderr, "
      "and the exit code when it is not 0). Each call starts in a fresh working directory; "
      "print the values you need.";
  if (spec.egress() == Egress::closed) {
    text += " The sandbox has no network access.";
  } else {
    text += " The sandbox can reach only these hosts over HTTPS:";
    for (const auto& host : spec.egress_allow()) text += " " + host;
    text += ".";
  }
  text += " The program is stopped after " + seconds_text(options.exec_timeout) + " seconds.";
  if (options.file_store) {
    text +=
        " Pass `files` to copy named files from the shared file store into the working "
        "directory.";
  }
  if (registry) {
    text += " Host functions are available with `import airlock_host_tools as tools`:";
    for (const auto& name : registry->names()) text += " tools.call(\"" + name + "\", …)";
    text += "; each returns a JSON value or raises tools.HostToolError.";
  }
  switch (options.spec.outputs) {
    case Outputs::none:
      break;
    case Outputs::declared:
      text +=
          " To save files, write them in the working directory and list their names in "
          "`outputs`; they are saved only when the program exits with 0.";
      break;
    case Outputs::manifest:
      text +=
          " To save files, write them in the working directory and list them in "
          "outputs.json as {\"outputs\": [{\"path\": \"name\"}]}; they are saved only when "
          "the program exits with 0.";
      break;
  }
  return text;
}

}  // namespace airlock::kinds::codeact
