// The registered tables: function-local statics, so a registrar running during another file's
// static initialisation finds them constructed.
#include "core/config/name_tables.h"

#include <array>
#include <stdexcept>

namespace tandem {

namespace {

std::array<std::vector<std::string>, 4>& tables() {
  static std::array<std::vector<std::string>, 4> t;
  return t;
}

std::vector<ConfigRule>& rules() {
  static std::vector<ConfigRule> r;
  return r;
}

const char* table_name(NameTable table) {
  switch (table) {
    case NameTable::kArTask:
      return "AR tasks";
    case NameTable::kImageTask:
      return "image tasks";
    case NameTable::kArReward:
      return "AR rewards";
    default:
      return "image rewards";
  }
}

}  // namespace

const std::vector<std::string>& registered_names(NameTable table) {
  const std::vector<std::string>& names = tables()[static_cast<size_t>(table)];
  if (names.empty())
    throw std::logic_error(std::string("no owner registered the ") + table_name(table) +
                           " (its registrar was not linked: link tandem_core whole)");
  return names;
}

NameRegistrar::NameRegistrar(NameTable table, const std::vector<std::string>& names) {
  std::vector<std::string>& t = tables()[static_cast<size_t>(table)];
  t.insert(t.end(), names.begin(), names.end());
}

void run_ar_model_rules(const Config& config) {
  if (rules().empty()) throw std::logic_error("no owner registered the AR model rules (link tandem_core whole)");
  for (const ConfigRule rule : rules()) rule(config);
}

ArModelRuleRegistrar::ArModelRuleRegistrar(ConfigRule rule) { rules().push_back(rule); }

}  // namespace tandem
