// Runs a real `rfos server` process for integration tests: its control socket in a directory of its own (0755, so
// tests may call it as other users too), a temporary data directory, stdout parsed for the address. kill() is
// SIGKILL (crash), stop() is SIGTERM.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#ifndef RFOS_BINARY
#error "RFOS_BINARY must name the rfos executable"
#endif

namespace rfos::testing {

// Checks `done` every `every` (each check a call to the server: what it reports is the event waited for) until it
// holds or `limit` passed; returns whether it held.
inline bool poll_until(const std::function<bool()>& done, std::chrono::milliseconds limit,
                       std::chrono::milliseconds every) {
  for (auto deadline = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < deadline;) {
    if (done()) return true;
    std::this_thread::sleep_for(every);
  }
  return done();
}

// Removes the shared-memory regions a process that died without closing its endpoints left behind (libfabric
// shm names them rfos-<pid>-...), as an operator would after a crash, so test runs do not fill /dev/shm.
inline void remove_shm_regions_of(pid_t pid) {
  std::error_code ec;
  std::string prefix = "rfos-" + std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
}

class ServerProcess {
 public:
  explicit ServerProcess(std::string data_dir, std::vector<std::string> extra = {})
      : data_dir_(std::move(data_dir)), extra_(std::move(extra)) {
    char tmpl[] = "/tmp/rfos-ctl-XXXXXX";
    if (mkdtemp(tmpl)) {
      socket_dir_ = tmpl;
      chmod(tmpl, 0755);
    }
  }
  ~ServerProcess() {
    stop();
    std::error_code ec;
    if (!socket_dir_.empty()) std::filesystem::remove_all(socket_dir_, ec);
  }
  // The control socket's path (the server listens there unless `extra` names another).
  std::string socket_path() const { return socket_dir_ + "/control.sock"; }

  // Starts the server and waits for its address (and, with --create-defaults, for the default container).
  bool start() {
    int out[2];
    if (pipe(out) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      std::vector<std::string> args = {
          RFOS_BINARY, "server", "--data-dir", data_dir_, "--target-bytes", std::to_string(80ull << 20),
          "--targets", "2"};
      if (std::find(extra_.begin(), extra_.end(), "--control-socket") == extra_.end())
        args.insert(args.end(), {"--control-socket", socket_path()});
      args.insert(args.end(), extra_.begin(), extra_.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[512];
    // With --create-defaults the server says when the default pool and container are ready, after it listens.
    bool defaults = std::find(extra_.begin(), extra_.end(), "--create-defaults") != extra_.end();
    while (fgets(line, sizeof(line), f)) {
      std::string l(line);
      auto at = l.find("listening on ");
      if (at != std::string::npos) address_ = l.substr(at + 13, l.find(' ', at + 13) - at - 13);
      if (!address_.empty() && (!defaults || l.find("are ready") != std::string::npos)) break;
    }
    // Keep draining stdout in the background so the server never blocks on a full pipe.
    std::thread([f] {
      char buf[512];
      while (fgets(buf, sizeof(buf), f)) {
      }
      fclose(f);
    }).detach();
    return !address_.empty();
  }

  // SIGKILL: a crash (the shared-memory regions it leaves behind are removed).
  void kill(int sig = SIGKILL) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    exit_status_ = status;
    if (WIFSIGNALED(status)) remove_shm_regions_of(pid_);
    pid_ = -1;
  }
  // SIGTERM: a clean stop (the server closes its endpoints and exits 0); SIGKILL if it does not within 10 s.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_status_ = status;
        pid_ = -1;
        return;
      }
      usleep(10000);
    }
    kill();
  }
  const std::string& address() const { return address_; }
  int exit_status() const { return exit_status_; }

 private:
  std::string data_dir_;
  std::string socket_dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  std::string address_;
  int exit_status_ = 0;
};

}  // namespace rfos::testing
