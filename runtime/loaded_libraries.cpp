// dl_iterate_phdr walks the loader's link map: every object mapped now, dlopen'ed ones included.
#include "runtime/loaded_libraries.h"

#include <link.h>

namespace tandem {

std::vector<std::string> loaded_libraries(const std::string& prefix) {
  struct Walk {
    const std::string* prefix;
    std::vector<std::string> found;
  } walk{&prefix, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* w = static_cast<Walk*>(data);
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        const auto slash = path.rfind('/');
        const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
        if (!path.empty() && name.rfind(*w->prefix, 0) == 0) w->found.push_back(path);
        return 0;
      },
      &walk);
  return walk.found;
}

}  // namespace tandem
