// Runs a program as a child process (no shell): exit code and combined output, or a handle to
// kill it mid-run.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace megacpp::testing {

struct ProcessResult {
  int exit_code = -1;   // -1 when killed by a signal
  int signal = 0;       // the signal that ended it, if any
  std::string output;   // stdout and stderr, interleaved
};

class Process {
 public:
  // Starts `exe args...` with stdout and stderr redirected to `log`.
  Process(const std::string& exe, const std::vector<std::string>& args, const std::filesystem::path& log) : log_(log) {
    std::vector<std::string> argv_store{exe};
    argv_store.insert(argv_store.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
      std::vector<char*> argv;
      for (auto& a : argv_store) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(exe.c_str(), argv.data());
      ::_exit(127);
    }
  }
  // Sends SIGKILL.
  void kill() { ::kill(pid_, SIGKILL); }
  // Waits for the end and collects the result.
  ProcessResult wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ProcessResult r;
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    r.output = ss.str();
    return r;
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
};

// Runs to completion.
inline ProcessResult run_process(const std::string& exe, const std::vector<std::string>& args,
                                 const std::filesystem::path& log) {
  return Process(exe, args, log).wait();
}

}  // namespace megacpp::testing
