// Encoding follows tensorflow/core/util/event.proto and the TFRecord format:
// [uint64 length][uint32 masked_crc32c(length)][payload][uint32 masked_crc32c(payload)].
#include "core/run/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "common/error.h"

namespace tandem {

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // Castagnoli, reflected
    table[i] = c;
  }
  return table;
}

uint32_t masked_crc(const uint8_t* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <class T>
void put_fixed(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));  // little-endian host (x86-64, aarch64)
  out.append(buf, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_varint(out, (field << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_varint(e, (1 << 3) | 1);  // wall_time: double
  put_fixed<double>(e, wall_time);
  put_varint(e, (2 << 3) | 0);  // step: int64
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ =
      dir + "/events.out.tfevents." + std::to_string(std::time(nullptr)) + "." + host + "." + std::to_string(getpid());
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) throw UserError(path_ + ": cannot create TensorBoard event file");
  std::string e = event_header(static_cast<double>(std::time(nullptr)), 0);
  put_bytes(e, 3, "brain.Event:2");  // file_version
  write_record(e);
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::map<std::string, double>& scalars, double wall_time) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);         // Summary.Value.tag
    put_varint(v, (2 << 3) | 5);  // simple_value: float
    put_fixed<float>(v, static_cast<float>(value));
    put_bytes(summary, 1, v);  // Summary.value
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  write_record(e);
}

void TensorBoardWriter::flush() { std::fflush(file_); }

void TensorBoardWriter::write_record(const std::string& payload) {
  std::string rec;
  const uint64_t len = payload.size();
  put_fixed<uint64_t>(rec, len);
  put_fixed<uint32_t>(rec, masked_crc(reinterpret_cast<const uint8_t*>(rec.data()), 8));
  rec += payload;
  put_fixed<uint32_t>(rec, masked_crc(reinterpret_cast<const uint8_t*>(payload.data()), payload.size()));
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size()) throw std::runtime_error(path_ + ": write failed");
}

}  // namespace tandem
