// TensorBoard event files (scalars): TFRecord framing with masked CRC-32C around hand-encoded
// Event / Summary protobufs, so runs open in TensorBoard without a protobuf or TF dependency.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

namespace tandem {

uint32_t crc32c(const uint8_t* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates <dir>/events.out.tfevents.<time>.<host>.<pid> and writes the file-version event.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalars(int64_t step, const std::map<std::string, double>& scalars, double wall_time);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace tandem
