// The safetensors reader and writer: round trips, and every malformed file a
// clear WeightsFormatError (Note [Safetensors validated before use]).
#include "weights/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

namespace grove::weights {
namespace {

using runtime::DType;

std::vector<uint8_t> float_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<TensorToWrite> sample_tensors() {
  std::vector<int64_t> ids = {7, -3, 1 << 20};
  std::vector<uint8_t> id_bytes(ids.size() * 8);
  std::memcpy(id_bytes.data(), ids.data(), id_bytes.size());
  return {
      {"layer.weight", DType::kF32, {2, 3}, float_bytes({1.5f, -2, 3, 4, 5.25f, -6})},
      {"layer.bias", DType::kF32, {3}, float_bytes({0.5f, 0.25f, -1})},
      {"ids", DType::kI64, {3}, id_bytes},
      {"empty", DType::kF32, {0, 4}, {}},
  };
}

// A file from a header given as JSON text and a data buffer of `data_bytes`.
std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> file(8 + header.size() + data_bytes, 0x11);
  uint64_t length = header.size();
  std::memcpy(file.data(), &length, 8);
  std::memcpy(file.data() + 8, header.data(), header.size());
  return file;
}

std::string error_of(std::vector<uint8_t> bytes) {
  try {
    SafetensorsFile::from_bytes(std::move(bytes), "test.safetensors");
  } catch (const WeightsFormatError& error) {
    return error.what();
  }
  return "no error";
}

TEST(Safetensors, RoundTripKeepsNamesShapesDtypesAndBytes) {
  std::vector<uint8_t> bytes = encode_safetensors(sample_tensors(), {{"format", "pt"}});
  SafetensorsFile file = SafetensorsFile::from_bytes(bytes, "memory");
  ASSERT_EQ(file.entries().size(), 4u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (const TensorToWrite& tensor : sample_tensors()) {
    const SafetensorsEntry& entry = file.entry(tensor.name);
    EXPECT_EQ(entry.shape, tensor.shape) << tensor.name;
    EXPECT_EQ(entry.dtype, tensor.dtype) << tensor.name;
    std::span<const uint8_t> read = file.bytes(entry);
    EXPECT_EQ(std::vector<uint8_t>(read.begin(), read.end()), tensor.bytes) << tensor.name;
  }
  EXPECT_EQ(file.entry("ids").dtype_name, "I64");
  // The header is padded so the data starts 8-byte aligned.
  uint64_t header_length;
  std::memcpy(&header_length, bytes.data(), 8);
  EXPECT_EQ(header_length % 8, 0u);
}

TEST(Safetensors, OpenMapsAFileWrittenToDisk) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "round_trip.safetensors").string();
  write_safetensors(path, sample_tensors());
  SafetensorsFile file = SafetensorsFile::open(path);
  SafetensorsFile moved = std::move(file);
  std::span<const uint8_t> bias = moved.bytes(moved.entry("layer.bias"));
  float values[3];
  std::memcpy(values, bias.data(), sizeof(values));
  EXPECT_EQ(values[0], 0.5f);
  EXPECT_EQ(values[2], -1.0f);
  EXPECT_EQ(moved.find("missing"), nullptr);
  EXPECT_NE(std::string(moved.path()), "");
}

TEST(Safetensors, ReadsAFileWrittenByTheReferenceLayout) {
  // As the Python safetensors package writes it: unpadded header, metadata first.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  SafetensorsFile file = SafetensorsFile::from_bytes(raw_file(header, 8), "reference");
  EXPECT_EQ(file.entry("a").dtype, DType::kBF16);
  EXPECT_EQ(file.entry("b").begin, 4u);
}

TEST(Safetensors, TruncatedFilesNameWhatIsMissing) {
  EXPECT_NE(error_of({1, 2, 3}).find("truncated: 3 bytes"), std::string::npos);
  std::vector<uint8_t> whole = encode_safetensors(sample_tensors());
  std::vector<uint8_t> header_cut(whole.begin(), whole.begin() + 20);
  EXPECT_NE(error_of(header_cut).find("is truncated: its header claims"), std::string::npos);
  std::vector<uint8_t> data_cut(whole.begin(), whole.end() - 4);
  std::string message = error_of(data_cut);
  EXPECT_NE(message.find("reach past"), std::string::npos) << message;
  EXPECT_NE(message.find("tensor 'layer.weight'"), std::string::npos) << message;
}

TEST(Safetensors, OversizedHeaderIsRefusedBeforeParsing) {
  std::vector<uint8_t> file(16, ' ');
  uint64_t huge = uint64_t{1} << 40;
  std::memcpy(file.data(), &huge, 8);
  std::string message = error_of(file);
  EXPECT_NE(message.find("exceeds the limit"), std::string::npos) << message;
  ::setenv("GROVE_SAFETENSORS_MAX_HEADER_BYTES", "16", 1);
  message = error_of(encode_safetensors(sample_tensors()));
  ::unsetenv("GROVE_SAFETENSORS_MAX_HEADER_BYTES");
  EXPECT_NE(message.find("limit of 16 bytes"), std::string::npos) << message;
}

TEST(Safetensors, OverlapsGapsAndTrailingBytesNameTheTensor) {
  std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  std::string message = error_of(raw_file(overlap, 12));
  EXPECT_NE(message.find("tensor 'b'"), std::string::npos) << message;
  EXPECT_NE(message.find("overlap tensor 'a'"), std::string::npos) << message;

  std::string gap = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  message = error_of(raw_file(gap, 12));
  EXPECT_NE(message.find("gap of 4 bytes"), std::string::npos) << message;

  std::string one = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  message = error_of(raw_file(one, 10));
  EXPECT_NE(message.find("6 bytes after the last tensor"), std::string::npos) << message;
}

TEST(Safetensors, BadDtypesShapesAndOffsetsNameTheField) {
  auto with = [](const std::string& entry, size_t data = 4) {
    return error_of(raw_file(R"({"t":)" + entry + "}", data));
  };
  EXPECT_NE(with(R"({"dtype":"F31","shape":[1],"data_offsets":[0,4]})").find("unknown dtype 'F31'"),
            std::string::npos);
  EXPECT_NE(with(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})").find("needs 8 bytes"),
            std::string::npos);
  EXPECT_NE(with(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})").find("sizes are integers"),
            std::string::npos);
  EXPECT_NE(with(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})")
                .find("overflows 64 bits"),
            std::string::npos);
  EXPECT_NE(with(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})").find("end before"),
            std::string::npos);
  EXPECT_NE(with(R"({"dtype":"F32","shape":[1]})").find("missing field 'data_offsets'"),
            std::string::npos);
  EXPECT_NE(
      with(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1})").find("unknown field 'x'"),
      std::string::npos);
  EXPECT_NE(with(R"([1])").find("expected an object"), std::string::npos);
  EXPECT_NE(error_of(raw_file("[]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(raw_file(R"({"a":)", 0)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(raw_file(R"({"a":{"b":{"c":{"d":{"e":1}}}}})", 0)).find("nests deeper"),
            std::string::npos);
}

TEST(Safetensors, EncodeRejectsDuplicateNamesAndWrongByteCounts) {
  std::vector<TensorToWrite> tensors = sample_tensors();
  tensors.push_back(tensors.front());
  EXPECT_THROW(encode_safetensors(tensors), WeightsFormatError);
  tensors = sample_tensors();
  tensors[0].bytes.pop_back();
  EXPECT_THROW(encode_safetensors(tensors), WeightsFormatError);
}

TEST(Safetensors, OpenNamesAMissingFileOrADirectory) {
  try {
    SafetensorsFile::open("/nonexistent/w.safetensors");
    FAIL() << "expected an error";
  } catch (const WeightsFormatError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/w.safetensors"), std::string::npos);
  }
  EXPECT_THROW(SafetensorsFile::open(::testing::TempDir()), WeightsFormatError);
}

// Note [Weights files that cannot block]: open() of a FIFO with no writer used
// to wait for one forever; the alarm ends the test instead if it blocks.
TEST(Safetensors, AFifoIsRefusedWithoutBlocking) {
  const std::string path = (std::filesystem::path(::testing::TempDir()) / "fifo").string();
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  ::alarm(20);
  for (auto load : {&SafetensorsFile::open, &SafetensorsFile::read}) {
    try {
      load(path);
      ADD_FAILURE() << "a FIFO was accepted";
    } catch (const WeightsFormatError& error) {
      EXPECT_NE(std::string(error.what()).find("is not a regular file"), std::string::npos)
          << error.what();
    }
  }
  ::alarm(0);
  ::unlink(path.c_str());
}

// read() keeps its own copy: truncating the file afterwards (a mapping would
// raise SIGBUS on the next read) changes nothing it returns.
TEST(Safetensors, ReadKeepsItsBytesWhenTheFileIsTruncated) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "truncated_later.safetensors").string();
  write_safetensors(path, sample_tensors());
  SafetensorsFile file = SafetensorsFile::read(path);
  ASSERT_EQ(::truncate(path.c_str(), 0), 0) << std::strerror(errno);
  std::span<const uint8_t> bias = file.bytes(file.entry("layer.bias"));
  float values[3];
  std::memcpy(values, bias.data(), sizeof(values));
  EXPECT_EQ(values[0], 0.5f);
  EXPECT_EQ(values[2], -1.0f);
  EXPECT_EQ(file.path(), path);
}

// Random byte flips, truncations, extensions and header rewrites of a valid
// file: each must parse or throw WeightsFormatError, and a parsed file's
// entries must stay inside the data it holds. The seed is printed on failure.
TEST(Safetensors, RandomMutationsEndInSuccessOrWeightsFormatError) {
  const std::vector<uint8_t> valid = encode_safetensors(sample_tensors(), {{"k", "v"}});
  uint64_t header_length;
  std::memcpy(&header_length, valid.data(), 8);
  const uint32_t seed = 20261124;
  std::mt19937 random(seed);
  int parsed = 0, refused = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::vector<uint8_t> bytes = valid;
    const int mutations = 1 + static_cast<int>(random() % 4);
    for (int m = 0; m < mutations; ++m) {
      switch (random() % 6) {
        case 0:  // flip a byte anywhere
          if (!bytes.empty()) {
            bytes[random() % bytes.size()] ^= static_cast<uint8_t>(1 + random() % 255);
          }
          break;
        case 1:  // a digit or punctuation in the header
          if (bytes.size() > 8 && header_length > 0) {
            size_t at = 8 + random() % std::min<size_t>(header_length, bytes.size() - 8);
            bytes[at] = static_cast<uint8_t>("0123456789[]{},:\"-"[random() % 18]);
          }
          break;
        case 2:  // truncate
          bytes.resize(random() % (bytes.size() + 1));
          break;
        case 3:  // extend
          bytes.resize(bytes.size() + random() % 32, static_cast<uint8_t>(random()));
          break;
        case 4:  // rewrite the header length
          if (bytes.size() >= 8) {
            uint64_t length = random() % 2 ? random() % (header_length + 16) : random();
            std::memcpy(bytes.data(), &length, 8);
          }
          break;
        default:  // a byte of the header's length
          if (bytes.size() >= 8) bytes[random() % 8] = static_cast<uint8_t>(random());
          break;
      }
    }
    const size_t size = bytes.size();
    try {
      SafetensorsFile file = SafetensorsFile::from_bytes(std::move(bytes), "mutant");
      ASSERT_EQ(file.file_size(), size);
      for (const SafetensorsEntry& entry : file.entries()) {
        ASSERT_LE(entry.begin, entry.end) << "seed " << seed << " trial " << trial;
        ASSERT_LE(file.buffer_offset() + entry.end, size) << "seed " << seed << " trial " << trial;
        uint64_t sum = 0;  // touches every byte handed out
        for (uint8_t byte : file.bytes(entry)) sum += byte;
        ASSERT_LE(sum, 255 * entry.nbytes());
      }
      ++parsed;
    } catch (const WeightsFormatError&) {
      ++refused;
    } catch (const std::exception& error) {
      FAIL() << "seed " << seed << " trial " << trial
             << ": not a WeightsFormatError: " << error.what();
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(parsed, 0) << "no mutant parsed; the mutations only test one path";
}

}  // namespace
}  // namespace grove::weights
