// `--profile` of the bench commands: the LibTorch (Kineto) profiler over one scope, with every
// operator's input shapes recorded (the legacy RecordProfile keeps none, and a GEMM's cost is
// only readable beside its shape), written as a Chrome trace when the scope ends.
#pragma once

#include <torch/csrc/autograd/profiler_kineto.h>

#include <string>

namespace tandem::app {

class ProfileScope {
 public:
  explicit ProfileScope(std::string path) : path_(std::move(path)) {
    namespace prof = torch::autograd::profiler;
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/true);
    const std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  }
  ~ProfileScope() { torch::autograd::profiler::disableProfiler()->save(path_); }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  std::string path_;
};

}  // namespace tandem::app
