// safetensors reader / writer (the Hugging Face directory layout is in hf_weights.cpp). The reader
// validates the whole header before touching data, so a hostile or truncated file is a UserError,
// never UB.
#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "common/error.h"
#include "common/regular_file.h"
#include "models/safetensors_detail.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

namespace tandem::models {

using detail::fail;
using detail::parse_strict_json;
using detail::printable;

namespace {

using json = nlohmann::json;

// torch kernels and the format itself have no use for more; it also bounds what a malicious
// header can make us allocate per tensor.
constexpr size_t kMaxDims = 64;

struct DtypeSpec {
  const char* name;
  torch::Dtype dtype;
  uint64_t size;
};

// In the reference writer's order: descending alignment, ties in its enum order. The writer
// lays tensors out in this order so every tensor's data stays aligned to its element size.
constexpr DtypeSpec kDtypes[] = {
    {"I64", torch::kInt64, 8},     {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"I32", torch::kInt32, 4},
    {"BF16", torch::kBFloat16, 2}, {"F16", torch::kFloat16, 2}, {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},
    {"U8", torch::kUInt8, 1},      {"BOOL", torch::kBool, 1},
};

const DtypeSpec* dtype_by_name(const std::string& name) {
  for (const DtypeSpec& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DtypeSpec* dtype_by_torch(torch::Dtype dtype) {
  for (const DtypeSpec& d : kDtypes)
    if (dtype == d.dtype) return &d;
  return nullptr;
}

std::string supported_dtypes() {
  std::string s;
  for (const DtypeSpec& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string errno_str() { return std::strerror(errno); }

// A read-only file descriptor with exact positional reads; every read is bounds-checked by the
// kernel, so a file that shrinks under us ends in an error, not a short buffer.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below); it changes
    // nothing for the regular file we then read.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) fail(path_, errno == ENOENT ? "file does not exist" : "cannot open: " + errno_str());
    struct stat st {};
    const bool ok = ::fstat(fd_, &st) == 0;
    const std::string err = ok ? "" : errno_str();
    if (!ok || !S_ISREG(st.st_mode)) {
      ::close(fd_);  // the destructor does not run for a throwing constructor
      fail(path_, ok ? "not a regular file" : "cannot stat: " + err);
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  void read_exact(uint64_t offset, void* dst, uint64_t n) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, 1ull << 30));
      const ssize_t got = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail(path_, "read error: " + errno_str());
      if (got == 0) fail(path_, "unexpected end of file (truncated or modified while reading)");
      p += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Product of dims times the element size, or false when it cannot be a real tensor: the byte
// count or the contiguous strides LibTorch computes (product of max(dim, 1)) overflow int64.
bool byte_size(const std::vector<int64_t>& shape, uint64_t itemsize, uint64_t* nbytes) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t numel = 1, extent = itemsize;
  for (int64_t d : shape) {
    const uint64_t u = static_cast<uint64_t>(d);
    if (__builtin_mul_overflow(numel, u, &numel)) return false;
    if (__builtin_mul_overflow(extent, std::max<uint64_t>(u, 1), &extent) || extent > kMax) return false;
  }
  *nbytes = numel * itemsize;  // <= extent, so no overflow
  return true;
}

uint64_t unsigned_field(const json& v, const std::string& path, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) fail(path, what + " is negative (" + std::to_string(v.get<int64_t>()) + ")");
  fail(path, what + " is not a non-negative integer");
}

SafetensorsTensorInfo parse_tensor_entry(const std::string& path, const std::string& name, const json& e) {
  const std::string where = "tensor '" + printable(name) + "'";
  if (!e.is_object()) fail(path, where + ": header entry is not a JSON object");
  const auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) fail(path, where + ": missing or non-string \"dtype\"");
  const DtypeSpec* spec = dtype_by_name(dt->get<std::string>());
  if (!spec)
    fail(path, where + ": unsupported dtype \"" + printable(dt->get<std::string>()) +
                   "\" (supported: " + supported_dtypes() + ")");

  SafetensorsTensorInfo info;
  info.dtype = spec->name;
  info.torch_dtype = spec->dtype;
  const auto shape = e.find("shape");
  if (shape == e.end() || !shape->is_array()) fail(path, where + ": missing or non-array \"shape\"");
  if (shape->size() > kMaxDims)
    fail(path, where + ": shape has " + std::to_string(shape->size()) + " dims (at most 64)");
  for (const json& d : *shape) {
    const uint64_t dim = unsigned_field(d, path, where + ": a shape dimension");
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(path, where + ": dimension too large");
    info.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto offsets = e.find("data_offsets");
  if (offsets == e.end() || !offsets->is_array() || offsets->size() != 2)
    fail(path, where + ": \"data_offsets\" must be [begin, end]");
  info.begin = unsigned_field((*offsets)[0], path, where + ": data_offsets begin");
  info.end = unsigned_field((*offsets)[1], path, where + ": data_offsets end");
  if (info.begin > info.end)
    fail(path, where + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                   "] end before they begin");

  uint64_t nbytes = 0;
  if (!byte_size(info.shape, spec->size, &nbytes))
    fail(path, where + ": shape " + shape_str(info.shape) + " is too large to be a tensor");
  if (info.end - info.begin != nbytes)
    fail(path, where + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "] span " +
                   std::to_string(info.end - info.begin) + " bytes but shape " + shape_str(info.shape) + " of " +
                   spec->name + " needs " + std::to_string(nbytes));
  return info;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& m) {
  std::map<std::string, std::string> out;
  if (m.is_null()) return out;
  if (!m.is_object()) fail(path, "\"__metadata__\" is not a JSON object");
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) fail(path, "\"__metadata__\" value of \"" + printable(k) + "\" is not a string");
    out.emplace(k, v.get<std::string>());
  }
  return out;
}

// The format requires the tensors to tile the data buffer exactly: no overlap (aliasing), no
// hole (a polyglot file), nothing past the last tensor, nothing missing at the end.
void check_coverage(const SafetensorsInfo& info) {
  std::vector<std::pair<const SafetensorsTensorInfo*, const std::string*>> order;
  for (const auto& [name, t] : info.tensors) order.push_back({&t, &name});
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first->begin, a.first->end) < std::tie(b.first->begin, b.first->end);
  });
  uint64_t covered = 0;
  for (const auto& [t, name] : order) {
    const std::string where =
        "tensor '" + printable(*name) + "' at [" + std::to_string(t->begin) + ", " + std::to_string(t->end) + ")";
    if (t->begin > covered)
      fail(info.path, "bytes [" + std::to_string(covered) + ", " + std::to_string(t->begin) +
                          ") of the data buffer belong to no tensor (hole before " + where + ")");
    if (t->begin < covered) fail(info.path, where + " overlaps the tensor data ending at " + std::to_string(covered));
    covered = t->end;
  }
  if (covered > info.data_bytes)
    fail(info.path, "tensors need " + std::to_string(covered) + " bytes of data but the file has " +
                        std::to_string(info.data_bytes) + " after the header (truncated file?)");
  if (covered < info.data_bytes)
    fail(info.path,
         std::to_string(info.data_bytes - covered) + " trailing bytes after the last tensor belong to no tensor");
}

SafetensorsInfo read_header(const InputFile& file) {
  SafetensorsInfo info;
  info.path = file.path();
  if (file.size() < 8)
    fail(info.path, "file is " + std::to_string(file.size()) + " bytes, too short for a safetensors header");
  unsigned char len_bytes[8];
  file.read_exact(0, len_bytes, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeaderBytes)
    fail(info.path, "header length " + std::to_string(n) + " exceeds the 100 MB limit (corrupt file?)");
  if (n > file.size() - 8)
    fail(info.path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                        std::to_string(file.size()) + " bytes; truncated?)");
  info.header_bytes = n;
  info.data_start = 8 + n;
  info.data_bytes = file.size() - info.data_start;

  std::string text(n, '\0');
  file.read_exact(8, text.data(), n);
  if (text.empty() || text[0] != '{') fail(info.path, "header does not start with '{'");
  // Depth 3: the root object, a tensor entry, its shape / data_offsets arrays.
  const json header = parse_strict_json(text.data(), text.data() + text.size(), info.path, 3);
  if (!header.is_object()) fail(info.path, "header is not a JSON object");
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__")
      info.metadata = parse_metadata(info.path, entry);
    else
      info.tensors.emplace(name, parse_tensor_entry(info.path, name, entry));
  }
  check_coverage(info);
  return info;
}

void put_u64_le(uint64_t v, unsigned char out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

// Writes `path + ".tmp"` and renames it over `path` on commit(), after fsync, so a crash leaves
// either the old file or the complete new one. Without commit() the temp file is removed.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp") {
    file_ = std::fopen(tmp_.c_str(), "wb");
    if (!file_) fail(path_, "cannot create " + tmp_ + ": " + errno_str());
  }
  ~AtomicFile() {
    if (file_) {
      std::fclose(file_);
      std::remove(tmp_.c_str());
    }
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n) {
    if (n > 0 && std::fwrite(data, 1, n, file_) != n) fail(path_, "write failed: " + errno_str());
  }
  void commit() {
    if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) fail(path_, "write failed: " + errno_str());
    const int rc = std::fclose(file_);
    file_ = nullptr;
    if (rc != 0) {
      std::remove(tmp_.c_str());
      fail(path_, "write failed: " + errno_str());
    }
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const std::string err = errno_str();
      std::remove(tmp_.c_str());
      fail(path_, "cannot rename " + tmp_ + " into place: " + err);
    }
  }

 private:
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
};

}  // namespace

namespace detail {

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw UserError(path + ": " + what); }

std::string printable(const std::string& s, size_t max_len) {
  std::string out;
  for (unsigned char c : s.substr(0, max_len)) out += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
  if (s.size() > max_len) out += "...";
  return out;
}

json parse_strict_json(const char* begin, const char* end, const std::string& path, int max_depth) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (max_depth >= 0 && depth >= max_depth) fail(path, "header JSON is nested deeper than a safetensors header");
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key: {
        const auto& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second) fail(path, "duplicate key \"" + printable(k) + "\" in JSON");
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, callback);
  } catch (const json::exception& e) {
    fail(path, "invalid JSON: " + printable(e.what(), 300));
  }
}

void write_text_atomically(const std::string& path, const std::string& text) {
  AtomicFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace detail

std::string safetensors_dtype_name(torch::Dtype dtype) {
  const DtypeSpec* spec = dtype_by_torch(dtype);
  if (!spec)
    throw UserError(std::string("safetensors has no dtype for ") + std::string(c10::toString(dtype)) +
                    " (supported: " + supported_dtypes() + ")");
  return spec->name;
}

SafetensorsInfo read_safetensors_header(const std::string& path) {
  const InputFile file(path);
  return read_header(file);
}

std::map<std::string, torch::Tensor> load_safetensors(const std::string& path) {
  const InputFile file(path);  // header and data come from the same open file
  const SafetensorsInfo info = read_header(file);
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : info.tensors) {
    // Own memory per tensor: always aligned, whatever the offsets, and freed independently.
    torch::Tensor x = torch::empty(t.shape, torch::TensorOptions().dtype(t.torch_dtype));  // t.shape
    const uint64_t nbytes = t.end - t.begin;
    if (nbytes > 0) file.read_exact(info.data_start + t.begin, x.data_ptr(), nbytes);
    if (t.torch_dtype == torch::kBool) {
      // A bool byte other than 0/1 is undefined behaviour in LibTorch; normalise it.
      auto* p = static_cast<uint8_t*>(x.data_ptr());
      for (uint64_t i = 0; i < nbytes; ++i) p[i] = p[i] != 0;
    }
    out.emplace(name, std::move(x));
  }
  return out;
}

namespace {

// Everything save_safetensors can reject, checked before a byte is written.
const DtypeSpec& checked_for_save(const std::string& path, const std::string& name, const torch::Tensor& t) {
  const std::string where = "tensor '" + printable(name) + "'";
  if (name == "__metadata__") fail(path, "\"__metadata__\" is reserved and cannot name a tensor");
  try {
    (void)json(name).dump();
  } catch (const json::exception&) {
    fail(path, where + ": the name is not valid UTF-8");
  }
  if (!t.defined()) fail(path, where + " is undefined");
  if (t.layout() != torch::kStrided) fail(path, where + " is not a dense tensor");
  const DtypeSpec* spec = dtype_by_torch(t.scalar_type());
  if (!spec) fail(path, where + ": " + std::string(c10::toString(t.scalar_type())) + " has no safetensors dtype");
  return *spec;
}

}  // namespace

void detail::check_savable(const std::string& path, const std::string& name, const torch::Tensor& t) {
  checked_for_save(path, name, t);
}

void save_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  struct Entry {
    const std::string* name;
    const torch::Tensor* tensor;
    size_t rank;  // index into kDtypes: the reference writer's layout order
    uint64_t nbytes;
  };
  std::vector<Entry> entries;
  for (const auto& [name, t] : tensors) {
    const DtypeSpec& spec = checked_for_save(path, name, t);
    entries.push_back({&name, &t, static_cast<size_t>(&spec - kDtypes), static_cast<uint64_t>(t.numel()) * spec.size});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.rank < b.rank; });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Entry& e : entries) {
    header[*e.name] = {{"dtype", kDtypes[e.rank].name},
                       {"shape", e.tensor->sizes().vec()},
                       {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception&) {
    fail(path, "a metadata string is not valid UTF-8");  // names were checked above
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as the reference does

  AtomicFile out(path);
  unsigned char len[8];
  put_u64_le(text.size(), len);
  out.write(len, 8);
  out.write(text.data(), text.size());
  for (const Entry& e : entries) {
    // One tensor at a time on the host, so saving GPU weights never doubles host memory.
    const torch::Tensor host = e.tensor->detach().to(torch::kCPU).contiguous();
    out.write(host.data_ptr(), e.nbytes);
  }
  out.commit();
}

}  // namespace tandem::models
