// A fixed set of threads that run posted jobs, first posted first started: the target's media helpers and the
// mount's write-behind writers. The destructor lets every queued job run, then joins.
//
// Thread-safety: post from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rfos {

class WorkerPool {
 public:
  explicit WorkerPool(unsigned threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void post(std::function<void()> job);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable work_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace rfos
