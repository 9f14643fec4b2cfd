// The files_delete suite: a link is removed, never followed. Every probe plants and checks its
// own fixtures, so `measure_files_delete_probes` can run them with no gate and no planting.
#include "conformance/conformance_internal.hpp"

namespace airlock::conformance::detail {
namespace {

constexpr CapabilitySet kDelete{Capability::files_delete};
constexpr CapabilitySet kDeleteExec{Capability::files_delete, Capability::exec};

void still_there(ProbeContext& c, const std::string& path, const std::string& content,
                 const std::string& what) {
  c.check(c.guest_test("-f", path), what + ": " + path + " is gone");
  c.check(c.guest_cat(path) == content, what + ": " + path + " changed");
}

void links_are_unlinked(ProbeContext& c) {
  const std::string target = c.paths().outside + "/delete-target.txt";
  c.subject().plant_file(target, "target");
  for (const auto& [name, recursive] :
       {std::pair<std::string, bool>{"link-out", false}, {"link-out-recursive", true}}) {
    const std::string link = c.work() + "/" + name;
    c.subject().plant_symlink(link, target);
    c.sandbox().remove(name, c.work(), recursive);
    c.check(!c.guest_test("-L", link), "removing " + name + " left the link in place");
    still_there(c, target, "target", "removing " + name);
  }
}

void raced_removal(ProbeContext& c) {
  const std::string entry = c.work() + "/delete-race";
  const std::string decoy = c.paths().outside + "/delete-race";
  c.subject().plant_file(decoy + "/victim.txt", "victim");
  c.subject().plant_file(entry + "/victim.txt", "inside");
  auto to_link = [&] {
    const ExecResult result =
        c.run({"sh", "-c", "rm -rf \"$1\" && ln -s \"$2\" \"$1\"", "flip", entry, decoy});
    return result.exit_code == 0;
  };
  auto to_directory = [&] {
    const ExecResult result =
        c.run({"sh", "-c", "rm -rf \"$1\" && mkdir \"$1\" && printf inside > \"$1/victim.txt\"",
               "flip", entry});
    return result.exit_code == 0;
  };
  auto remove = [&] {
    try {
      c.sandbox().remove("delete-race/victim.txt", c.work(), false);
    } catch (const InvalidArgument&) {
    } catch (const SystemError&) {
    }
  };
  c.check(to_link(), "the guest could not flip the race entry (to link)");
  c.expect_refused<ConfinementError>(
      "ConfinementError", "a removal through the linked parent",
      [&] { c.sandbox().remove("delete-race/victim.txt", c.work(), false); });
  c.check(to_directory(), "the guest could not flip the race entry (to directory)");
  c.sandbox().remove("delete-race/victim.txt", c.work(), false);
  c.check(!c.guest_test("-e", entry + "/victim.txt"),
          "the positive control failed: the file in the restored directory was not removed");
  race(c, to_link, to_directory, remove);
  still_there(c, decoy + "/victim.txt", "victim", "a removal raced through the linked parent");
}

}  // namespace

std::vector<ProbeDefinition> files_delete_probes() {
  std::vector<ProbeDefinition> probes;
  auto add = [&probes](std::string name, std::string why, CapabilitySet needs, bool reference,
                       std::function<void(ProbeContext&)> run) {
    probes.push_back({std::move(name), std::move(why), needs, reference, std::move(run)});
  };
  add("a-removal-removes", "a removed file is gone and its neighbour stays", kDelete, true,
      [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/doomed.txt", "doomed");
        c.subject().plant_file(c.work() + "/bystander.txt", "bystander");
        c.sandbox().remove("doomed.txt", c.work(), false);
        c.check(!c.guest_test("-e", c.work() + "/doomed.txt"), "doomed.txt is still there");
        still_there(c, c.work() + "/bystander.txt", "bystander", "removing doomed.txt");
      });
  add("a-missing-path-is-success", "removing what is already gone succeeds (cleanup runs twice)",
      kDelete, true, [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/twice.txt", "twice");
        c.sandbox().remove("twice.txt", c.work(), false);
        c.sandbox().remove("twice.txt", c.work(), false);
        c.check(!c.guest_test("-e", c.work() + "/twice.txt"), "twice.txt is still there");
      });
  add("a-link-is-removed-never-followed",
      "removing a link, recursive or not, removes the link and leaves its target", kDelete, true,
      links_are_unlinked);
  add("a-path-through-a-linked-parent-is-refused",
      "a removal through a linked parent is an escape, recursive or not", kDelete, true,
      [](ProbeContext& c) {
        const std::string target = c.paths().outside + "/through/target.txt";
        c.subject().plant_file(target, "target");
        c.subject().plant_symlink(c.work() + "/delete-link-dir", c.paths().outside + "/through");
        for (bool recursive : {false, true}) {
          c.expect_refused<ConfinementError>(
              "ConfinementError",
              std::string("removing delete-link-dir/target.txt") +
                  (recursive ? " recursively" : ""),
              [&] { c.sandbox().remove("delete-link-dir/target.txt", c.work(), recursive); });
        }
        still_there(c, target, "target", "removals through a linked parent");
      });
  add("a-directory-needs-recursive", "a directory is refused without recursive", kDelete, true,
      [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/dir/content.txt", "content");
        c.expect_refused<SystemError>("SystemError", "removing dir without recursive",
                                      [&] { c.sandbox().remove("dir", c.work(), false); });
        still_there(c, c.work() + "/dir/content.txt", "content", "removing dir without recursive");
      });
  add("an-empty-directory-needs-recursive",
      "even an empty directory needs recursive; with it, it goes", kDelete, true,
      [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/.probe-cwd", "");
        const ExecResult made = c.run({"mkdir", "-p", c.work() + "/empty"});
        c.check(made.exit_code == 0, "mkdir -p empty failed: " + made.stderr_text());
        c.expect_refused<SystemError>("SystemError",
                                      "removing an empty directory without recursive",
                                      [&] { c.sandbox().remove("empty", c.work(), false); });
        c.check(c.guest_test("-d", c.work() + "/empty"),
                "the empty directory went without recursive");
        c.sandbox().remove("empty", c.work(), true);
        c.check(!c.guest_test("-e", c.work() + "/empty"),
                "the empty directory stayed with recursive");
      });
  add("recursive-removes-the-tree", "a recursive removal takes the tree and only the tree", kDelete,
      true, [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/tree/leaf.txt", "leaf");
        c.subject().plant_file(c.work() + "/tree/deeper/leaf.txt", "leaf");
        c.subject().plant_file(c.work() + "/next-to-tree.txt", "next");
        c.sandbox().remove("tree", c.work(), true);
        c.check(!c.guest_test("-e", c.work() + "/tree"), "the tree is still there");
        still_there(c, c.work() + "/next-to-tree.txt", "next", "removing the tree");
      });
  add("a-link-inside-a-recursive-removal-is-unlinked-not-followed",
      "links inside a removed tree are unlinked; what they point at stays", kDelete, true,
      [](ProbeContext& c) {
        const std::string target = c.paths().outside + "/interior-target.txt";
        const std::string kept = c.paths().outside + "/interior-dir/kept.txt";
        c.subject().plant_file(target, "interior");
        c.subject().plant_file(kept, "kept");
        c.subject().plant_file(c.work() + "/linked-tree/file.txt", "file");
        c.subject().plant_symlink(c.work() + "/linked-tree/inside-link", target);
        c.subject().plant_symlink(c.work() + "/linked-tree/dir-link",
                                  c.paths().outside + "/interior-dir");
        c.sandbox().remove("linked-tree", c.work(), true);
        c.check(!c.guest_test("-e", c.work() + "/linked-tree"), "linked-tree is still there");
        still_there(c, target, "interior", "removing linked-tree");
        still_there(c, kept, "kept", "removing linked-tree");
      });
  add("the-working-directory-is-refused", "the working directory itself is never removed", kDelete,
      true, [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/ground.txt", "ground");
        for (bool recursive : {false, true}) {
          c.expect_refused<ConfinementError>(
              "ConfinementError", std::string("removing \".\"") + (recursive ? " recursively" : ""),
              [&] { c.sandbox().remove(".", c.work(), recursive); });
        }
        still_there(c, c.work() + "/ground.txt", "ground", "removing the working directory");
      });
  add("a-path-outside-is-refused", "a removal outside the working directory is refused", kDelete,
      true, [](ProbeContext& c) {
        const std::string target = c.paths().outside + "/beyond-target.txt";
        c.subject().plant_file(target, "beyond");
        for (bool recursive : {false, true}) {
          c.expect_refused<ConfinementError>(
              "ConfinementError",
              std::string("removing a path outside") + (recursive ? " recursively" : ""), [&] {
                c.sandbox().remove(c.paths().beyond("beyond-target.txt"), c.work(), recursive);
              });
        }
        still_there(c, target, "beyond", "removals outside");
      });

  // ---- airlock's own ----
  add("a-path-with-a-nul-byte-is-refused",
      "a NUL byte in a path is bad input, never truncated at the NUL", kDelete, false,
      [](ProbeContext& c) {
        c.subject().plant_file(c.work() + "/nul-kept", "kept");
        c.expect_refused<InvalidArgument>(
            "InvalidArgument", "removing a path with a NUL byte",
            [&] { c.sandbox().remove(std::string("nul-kept\0.txt", 13), c.work(), true); });
        still_there(c, c.work() + "/nul-kept", "kept", "a removal of a path with a NUL byte");
      });
  add("a-removal-raced-through-a-linked-parent-never-removes-outside",
      "while the guest swaps a parent directory for a link to outside and back, nothing outside "
      "is removed",
      kDeleteExec, false, raced_removal);
  return probes;
}

}  // namespace airlock::conformance::detail
