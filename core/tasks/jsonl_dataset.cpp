// Strict JSONL prompt loading: every error names the file, the line and the offending key.
#include "core/tasks/jsonl_dataset.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/regular_file.h"

namespace tandem::tasks {

namespace {

bool is_blank(const std::string& line) { return line.find_first_not_of(" \t\r\n") == std::string::npos; }

// The value of `key` in `record` as a string, or a UserError naming where and why not.
std::string string_field(const nlohmann::json& record, const std::string& key, const std::string& where) {
  const auto it = record.find(key);
  if (it == record.end()) throw UserError(where + ": missing key '" + key + "'");
  if (!it->is_string())
    throw UserError(where + ": key '" + key + "' must be a string, got " + std::string(it->type_name()));
  return it->get<std::string>();
}

}  // namespace

std::vector<Prompt> load_jsonl_prompts(const std::string& path, const std::string& prompt_key,
                                       const std::string& answer_key) {
  require_regular_file(path, "the prompt dataset ");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open the prompt dataset");
  std::vector<Prompt> prompts;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (is_blank(line)) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw UserError(where + ": not valid JSON (" + e.what() + ")");
    }
    if (!record.is_object())
      throw UserError(where + ": expected a JSON object, got " + std::string(record.type_name()));
    Prompt p;
    p.text = string_field(record, prompt_key, where);
    if (!answer_key.empty()) p.answer = string_field(record, answer_key, where);
    p.id = line_no - 1;
    prompts.push_back(std::move(p));
  }
  if (in.bad()) throw UserError(path + ": read error after line " + std::to_string(line_no));
  if (prompts.empty()) throw UserError(path + ": the prompt dataset is empty (no JSON lines)");
  return prompts;
}

}  // namespace tandem::tasks
