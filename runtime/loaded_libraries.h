// The shared libraries this process has mapped, from the dynamic loader's own list: how `tandem
// --version` shows which cudart and NCCL actually loaded (the wheel's, one copy each).
#pragma once

#include <string>
#include <vector>

namespace tandem {

// Paths of the loaded objects whose file name starts with `prefix` (e.g. "libcudart.so"), in load
// order; empty when none is loaded.
std::vector<std::string> loaded_libraries(const std::string& prefix);

}  // namespace tandem
