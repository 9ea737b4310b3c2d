// examples/eval/sandbox.hpp: runs an untrusted program (a compiler on candidate code, then the
// candidate's test binary) in a child process under limits, and always gets control back.
//
// POSIX (Linux) process code, so it lives with the megacpp-eval tool and not in the library's
// headers. What a run gets (docs/eval.md "Sandbox"):
// - a separate process (fork + execv), in its own process group, stdin from /dev/null, stdout and
//   stderr to a file in its temporary directory, TMPDIR pointing there;
// - wall-clock limit: the parent polls and SIGKILLs the whole process group at the deadline;
//   RLIMIT_CPU (the kernel kills at the CPU limit), RLIMIT_AS (address space), RLIMIT_FSIZE
//   (largest file written), RLIMIT_CORE 0;
// - no network: unshare(CLONE_NEWNET) (a fresh namespace with only a down loopback); without the
//   privilege for it, CLONE_NEWUSER | CLONE_NEWNET (unprivileged user namespaces); if both fail
//   the run goes on with the network and the result says so (network_isolated false);
// - processes: RLIMIT_NPROC. The kernel ignores it for root, so when the harness runs as root each
//   parallel slot runs its programs as its own unused uid (harness.hpp: a range per process; no capabilities, no
//   access to the user's files beyond what "others" may read); after each run every process of
//   that uid is killed, so even a child that left the process group (setsid) does not survive.
//   Not as root, the limit counts every process of the user, so it is set to the user's current
//   count plus max_processes (approximate on a busy machine), and leftovers are killed by
//   process group.
// A run that cannot be started (fork fails, the program is missing) is an Error; anything the
// program does is a SandboxResult.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "megacpp/core/error.hpp"

extern char** environ;

namespace megacpp::examples {

/// Limits of one sandboxed run.
struct SandboxLimits {
  double wall_seconds = 10;                       ///< SIGKILL to the process group after this
  std::int64_t cpu_seconds = 10;                  ///< RLIMIT_CPU
  std::int64_t memory_bytes = std::int64_t{512} << 20;  ///< RLIMIT_AS
  std::int64_t file_bytes = std::int64_t{64} << 20;     ///< RLIMIT_FSIZE
  std::int64_t max_processes = 64;                ///< RLIMIT_NPROC (see the header comment)
  bool isolate_network = true;                    ///< unshare a network namespace
};

/// How a sandboxed run ended.
struct SandboxResult {
  int exit_code = -1;             ///< exit status, -1 when killed by a signal
  int signal = 0;                 ///< the signal that ended it, 0 if it exited
  bool timed_out = false;         ///< killed at the wall-clock limit
  bool network_isolated = false;  ///< it ran in a fresh network namespace
  double seconds = 0;             ///< wall-clock time
  std::string output;             ///< the start of its stdout + stderr (at most 2 KiB)
};

/// The absolute path of `program`: itself if it contains a '/', else the first executable match
/// in $PATH; throws naming it otherwise.
inline std::filesystem::path find_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    check(::access(program.c_str(), X_OK) == 0, "sandbox", "compiler ", program, " is not an executable file");
    return program;
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / program;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  fail("sandbox", "compiler \"", program, "\" is not in PATH (", dirs, "): pass its path");
}

namespace detail {
// Processes of `uid` now running (from /proc), for the RLIMIT_NPROC of a non-root harness.
inline std::int64_t processes_of_user(uid_t uid) {
  std::int64_t n = 0;
  DIR* proc = ::opendir("/proc");
  if (!proc) return 0;
  while (const dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    struct stat st {};
    if (::stat((std::string("/proc/") + e->d_name).c_str(), &st) == 0 && st.st_uid == uid) ++n;
  }
  ::closedir(proc);
  return n;
}

// Kills every process `uid` owns, from a child running as that uid (kill(-1) as that uid reaches
// exactly its processes); for the dedicated sandbox uids only.
inline void kill_all_of_uid(uid_t uid) {
  const pid_t killer = ::fork();
  if (killer == 0) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(1);
    ::kill(-1, SIGKILL);
    ::_exit(0);
  }
  if (killer > 0) ::waitpid(killer, nullptr, 0);
}

// What the child reports through its close-on-exec pipe before exec (or instead of it).
struct ChildReport {
  int network_isolated = 0;
  int exec_errno = 0;  // set only when the exec failed
};
}  // namespace detail

/// Runs `argv` (argv[0] an absolute path) in `dir` under `limits`; with `run_as` the child takes
/// that uid and gid first (root only). The directory gets the output file "sandbox.out".
inline SandboxResult run_sandboxed(const std::vector<std::string>& argv, const std::filesystem::path& dir,
                                   const SandboxLimits& limits, std::optional<uid_t> run_as) {
  using Clock = std::chrono::steady_clock;
  check(!argv.empty() && argv[0].starts_with("/"), "sandbox", "needs an absolute program path");
  // Everything the child uses is built here: between fork and exec it may only make system calls.
  std::vector<std::string> arg_store = argv;
  std::vector<char*> args;
  for (auto& a : arg_store) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0) env_store.emplace_back(*e);
  env_store.push_back("TMPDIR=" + dir.string());
  std::vector<char*> env;
  for (auto& e : env_store) env.push_back(e.data());
  env.push_back(nullptr);
  const std::string out_path = (dir / "sandbox.out").string(), dir_path = dir.string();
  const bool root = ::geteuid() == 0;
  const rlim_t nproc = static_cast<rlim_t>(
      run_as || root ? limits.max_processes : detail::processes_of_user(::getuid()) + limits.max_processes);
  int report_pipe[2];
  check(::pipe2(report_pipe, O_CLOEXEC) == 0, "sandbox", "pipe2 failed: ", std::strerror(errno));
  const auto start = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(report_pipe[0]);
    ::close(report_pipe[1]);
    fail("sandbox", "fork failed: ", std::strerror(e));
  }
  if (pid == 0) {
    ::close(report_pipe[0]);
    detail::ChildReport report;
    ::setpgid(0, 0);
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    if (::chdir(dir_path.c_str()) != 0) ::_exit(126);
    if (limits.isolate_network)
      report.network_isolated = ::unshare(CLONE_NEWNET) == 0 || (!root && ::unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0);
    const auto limit = [](int resource, rlim_t value) {
      const rlimit r{value, value};
      ::setrlimit(resource, &r);
    };
    limit(RLIMIT_CPU, static_cast<rlim_t>(limits.cpu_seconds));
    limit(RLIMIT_AS, static_cast<rlim_t>(limits.memory_bytes));
    limit(RLIMIT_FSIZE, static_cast<rlim_t>(limits.file_bytes));
    limit(RLIMIT_CORE, 0);
    limit(RLIMIT_NPROC, nproc);
    if (run_as && (::setgroups(0, nullptr) != 0 || ::setgid(*run_as) != 0 || ::setuid(*run_as) != 0)) {
      report.exec_errno = errno;
      [[maybe_unused]] const auto w = ::write(report_pipe[1], &report, sizeof report);
      ::_exit(126);
    }
    [[maybe_unused]] const auto w1 = ::write(report_pipe[1], &report, sizeof report);
    ::execve(args[0], args.data(), env.data());
    report.exec_errno = errno;
    [[maybe_unused]] const auto w2 = ::write(report_pipe[1], &report, sizeof report);
    ::_exit(127);
  }
  ::close(report_pipe[1]);
  SandboxResult r;
  int status = 0;
  const auto deadline = start + std::chrono::duration<double>(limits.wall_seconds);
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    if (Clock::now() >= deadline) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Whatever the program left behind in its group (or, as a dedicated uid, anywhere) dies now.
  ::kill(-pid, SIGKILL);
  if (run_as) detail::kill_all_of_uid(*run_as);
  detail::ChildReport first, second;
  const bool got_first = ::read(report_pipe[0], &first, sizeof first) == static_cast<ssize_t>(sizeof first);
  const bool got_second = ::read(report_pipe[0], &second, sizeof second) == static_cast<ssize_t>(sizeof second);
  ::close(report_pipe[0]);
  const int exec_errno = got_second ? second.exec_errno : got_first ? first.exec_errno : 0;
  check(exec_errno == 0, "sandbox", "cannot start ", argv[0], run_as ? " as uid " + std::to_string(*run_as) : "", ": ",
        std::strerror(exec_errno));
  r.network_isolated = got_first && first.network_isolated;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  std::ifstream in(out_path, std::ios::binary);
  r.output.resize(2048);
  in.read(r.output.data(), static_cast<std::streamsize>(r.output.size()));
  r.output.resize(static_cast<std::size_t>(std::max<std::streamsize>(0, in.gcount())));
  return r;
}

/// A fresh private directory under the system's temporary directory, removed with everything in
/// it when this object dies (a removal that fails is reported on stderr, never thrown).
class TempDir {
 public:
  /// Creates the directory; with `owner` (root only) hands it to that uid.
  explicit TempDir(std::optional<uid_t> owner) {
    std::string pattern = (std::filesystem::temp_directory_path() / "megacpp-eval-XXXXXX").string();
    check(::mkdtemp(pattern.data()) != nullptr, "sandbox", "mkdtemp(", pattern, ") failed: ", std::strerror(errno));
    path_ = pattern;
    if (owner) check(::chown(path_.c_str(), *owner, *owner) == 0, "sandbox", "chown ", path_.string(), " failed");
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) std::fprintf(stderr, "megacpp-eval: warning: cannot remove %s: %s\n", path_.c_str(), ec.message().c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The directory.
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace megacpp::examples
