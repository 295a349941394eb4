// Reads the workload files of the benchmarks (bench_lengths.h).
#include "apps/bench_lengths.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.h"

namespace tandem::app {

namespace {
constexpr long long kMaxLength = 1 << 20;  // tokens of one prompt or response
}  // namespace

std::vector<SequenceSpec> read_lengths(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError("--lengths: cannot open " + path);
  std::vector<SequenceSpec> out;
  std::map<int64_t, int64_t> prompt_of;  // group -> its prompt length
  size_t width = 0;                      // numbers per line
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::istringstream fields(line);
    std::vector<long long> v;
    for (long long x; fields >> x;) v.push_back(x);
    const bool clean = fields.eof() && std::all_of(v.begin(), v.end(), [](long long x) { return x <= kMaxLength; });
    const std::string where = "--lengths: " + path + ":" + std::to_string(n) + ": '" + line + "'";
    if (!out.empty() && v.size() != width)
      throw UserError(where + ": every line of a lengths file has the same form (1 or 3 numbers)");
    width = v.size();
    if (clean && v.size() == 1 && v[0] >= 2) {
      out.push_back({static_cast<int64_t>(out.size()), v[0] - v[0] / 2, v[0] / 2});
    } else if (clean && v.size() == 3 && v[0] >= 0 && v[1] >= 1 && v[2] >= 1) {
      out.push_back({v[0], v[1], v[2]});
    } else {
      throw UserError(where + " is neither a length in [2, " + std::to_string(kMaxLength) +
                      "] nor 'group prompt_len response_len' (lengths >= 1)");
    }
    if (prompt_of.emplace(out.back().group, out.back().prompt).first->second != out.back().prompt)
      throw UserError(where + ": group " + std::to_string(out.back().group) + " was given prompt length " +
                      std::to_string(prompt_of[out.back().group]) + " before (a group shares one prompt)");
  }
  if (out.empty()) throw UserError("--lengths: " + path + " holds no lengths");
  return out;
}

}  // namespace tandem::app
