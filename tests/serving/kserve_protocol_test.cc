// The KServe v2 JSON forms: requests become rows checked against the model's
// signature, every malformed request a ProtocolError naming the field, and
// responses and metadata in the protocol's shape.
#include "serving/kserve_protocol.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <string>

namespace grove::serving {
namespace {

using nlohmann::json;
using runtime::DType;

ModelSignature signature() {
  ModelSignature s;
  s.inputs.push_back({"x", {3}, DType::kF32, 12});
  s.inputs.push_back({"ids", {2}, DType::kI64, 16});
  s.outputs.push_back({"y", {3}, DType::kF32, 12});
  s.outputs.push_back({"mask", {1}, DType::kBool, 1});
  return s;
}

json good_request() {
  return json::parse(R"({"id": "r1", "inputs": [
      {"name": "ids", "shape": [2, 2], "datatype": "INT64", "data": [[1, -2], [3, 4000000000000]]},
      {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [0.5, 1, 2, 3, 4, 5]}]})");
}

std::string error_of(const std::string& body) {
  try {
    parse_infer_request(body, signature(), 4);
  } catch (const ProtocolError& error) {
    return error.what();
  }
  return "no error";
}

std::string error_of(const json& body) { return error_of(std::string(body.dump())); }

TEST(KserveProtocol, RequestBecomesRowsInTheModelsInputOrder) {
  InferRequest parsed = parse_infer_request(good_request().dump(), signature(), 4);
  EXPECT_EQ(parsed.id, "r1");
  ASSERT_EQ(parsed.request.inputs().size(), 2u);
  EXPECT_EQ(parsed.request.inputs()[0].values<float>(), (std::vector<float>{0.5f, 1, 2, 3, 4, 5}));
  EXPECT_EQ(parsed.request.inputs()[1].values<int64_t>(),
            (std::vector<int64_t>{1, -2, 3, 4000000000000}));
  EXPECT_EQ(parsed.outputs, (std::vector<size_t>{0, 1}));
}

// Note [Requests checked once]: the parser's checks hand the server a
// CheckedRequest carrying its row count, so the server checks it no more.
TEST(KserveProtocol, AParsedRequestIsCheckedWithItsRows) {
  InferRequest parsed = parse_infer_request(good_request().dump(), signature(), 4);
  EXPECT_EQ(parsed.request.rows(), 2);
  Request released = std::move(parsed.request).release();
  ASSERT_EQ(released.inputs.size(), 2u);
  EXPECT_EQ(released.inputs[1].bytes.size(), 2u * 16u);
  EXPECT_EQ(CheckedRequest().rows(), 0);  // only a check gives a request rows
}

// Note [Requests checked once]: reading a request through InputChecks is its
// one check; a refused request hands nothing checked on.
TEST(KserveProtocol, AParsedRequestIsCheckedOnce) {
  const ModelSignature model = signature();
  parse_infer_request(good_request().dump(), model, 4);
  EXPECT_EQ(model.request_checks(), 1u);
  EXPECT_THROW(parse_infer_request(R"({"inputs": []})", model, 4), ProtocolError);
  EXPECT_EQ(model.request_checks(), 1u);
}

// Note [Request bytes copied once]: JSON data (read value by value, or as rows
// when every input has one dtype) and binary tensor data are decoded straight
// into pinned rows, which the worker copies to the device.
TEST(KserveProtocol, DecodedRowsLieInPinnedMemory) {
  InferRequest parsed = parse_infer_request(good_request().dump(), signature(), 4);
  for (const HostRows& rows : parsed.request.inputs()) {
    EXPECT_TRUE(PinnedRowPool::contains(rows.bytes.data())) << rows.str();
  }
  ModelSignature one_dtype;
  one_dtype.inputs.push_back({"x", {3}, DType::kF32, 12});
  one_dtype.outputs.push_back({"y", {3}, DType::kF32, 12});
  InferRequest as_rows = parse_infer_request(
      R"({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]}]})",
      one_dtype, 4);
  EXPECT_EQ(as_rows.request.inputs()[0].values<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(PinnedRowPool::contains(as_rows.request.inputs()[0].bytes.data()));
  // Note [Rows read into a scratch]: the pinned block holds the rows, not the
  // reader's bound on what the text could have held.
  EXPECT_EQ(as_rows.request.inputs()[0].bytes.capacity(), 6 * sizeof(float));
  const std::string text = R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",)"
                           R"( "parameters": {"binary_data_size": 12}}]})";
  const float values[3] = {0.5f, -1.0f, 2.0f};
  std::string body = text + std::string(reinterpret_cast<const char*>(values), sizeof(values));
  InferRequest binary = parse_infer_request(body, one_dtype, 4, text.size());
  EXPECT_EQ(binary.request.inputs()[0].values<float>(), (std::vector<float>{0.5f, -1.0f, 2.0f}));
  EXPECT_TRUE(PinnedRowPool::contains(binary.request.inputs()[0].bytes.data()));
  std::vector<uint8_t> pageable(64);
  EXPECT_FALSE(PinnedRowPool::contains(pageable.data()));
}

TEST(KserveProtocol, EveryMalformedFieldIsNamed) {
  json body = good_request();
  EXPECT_NE(error_of(std::string("{")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(std::string("[]")).find("must be a JSON object"), std::string::npos);
  body["inputs"][1]["shape"] = {2, 4};
  EXPECT_NE(error_of(body).find("inputs[1] ('x').shape: expected [rows, 3], found [2,4]"),
            std::string::npos)
      << error_of(body);
  body = good_request();
  body["inputs"][1]["shape"] = {2};
  EXPECT_NE(error_of(body).find("inputs[1] ('x').shape: expected [rows, 3]"), std::string::npos);
  body = good_request();
  body["inputs"][1]["shape"] = {5, 3};
  EXPECT_NE(error_of(body).find("5 rows is outside [1, 4]"), std::string::npos);
  body = good_request();
  body["inputs"][1]["data"][4] = "four";
  EXPECT_NE(error_of(body).find("inputs[1] ('x').data[4]: expected a number for FP32"),
            std::string::npos)
      << error_of(body);
  body = good_request();
  body["inputs"][0]["data"][0][1] = 1.5;
  EXPECT_NE(error_of(body).find("data[1]: expected an integer for INT64"), std::string::npos);
  body = good_request();
  body["inputs"][1]["shape"] = {1, 3};
  EXPECT_NE(error_of(body).find("1 rows, but an earlier input has 2"), std::string::npos);
  body = good_request();
  body["inputs"][1]["datatype"] = "FP16";
  EXPECT_NE(error_of(body).find("datatype: expected FP32, found FP16"), std::string::npos);
  body = good_request();
  body["inputs"][1]["name"] = "ids";
  EXPECT_NE(error_of(body).find("input 'ids' is given twice"), std::string::npos);
  body = good_request();
  body["outputs"] = {{{"name", "z"}}};
  EXPECT_NE(error_of(body).find("outputs[0].name: the model has no output 'z'"), std::string::npos);
  body = good_request();
  body["inputs"][1]["data"] = {1, 2, 3};
  EXPECT_NE(error_of(body).find("3 values for shape [2, 3], which holds 6"), std::string::npos);
  std::string deep =
      R"({"inputs": [{"name": "x", "data": )" + std::string(40, '[') + std::string(40, ']') + "}]}";
  EXPECT_NE(error_of(deep).find("nests deeper"), std::string::npos);
}

TEST(KserveProtocol, ResponseHoldsTheAskedOutputsWithShapesAndDatatypes) {
  json body = good_request();
  body["outputs"] = {{{"name", "mask"}}};
  InferRequest parsed = parse_infer_request(body.dump(), signature(), 4);
  Response response;
  response.outputs.push_back(HostRows::from_values<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  HostRows mask;
  mask.shape = {2, 1};
  mask.dtype = DType::kBool;
  mask.bytes = {1, 0};
  response.outputs.push_back(mask);
  json answer = json::parse(infer_response_json("m", parsed, signature(), response));
  EXPECT_EQ(answer["model_name"], "m");
  EXPECT_EQ(answer["id"], "r1");
  ASSERT_EQ(answer["outputs"].size(), 1u);
  EXPECT_EQ(answer["outputs"][0],
            json::parse(R"({"name":"mask","datatype":"BOOL","shape":[2,1],"data":[true,false]})"));
}

TEST(KserveProtocol, ResponseFloatsReadBackBitExactAndNonFiniteAreNull) {
  InferRequest parsed = parse_infer_request(good_request().dump(), signature(), 4);
  std::mt19937 random(5);
  std::vector<float> values(6);
  for (float& value : values) {
    uint32_t bits = random();
    std::memcpy(&value, &bits, 4);
    if (!std::isfinite(value)) value = 1.0f / 3.0f;
  }
  values[1] = std::numeric_limits<float>::quiet_NaN();
  values[2] = -std::numeric_limits<float>::infinity();
  values[3] = std::numeric_limits<float>::denorm_min();
  Response response;
  response.outputs.push_back(HostRows::from_values<float>(values, {2, 3}));
  HostRows mask;
  mask.shape = {2, 1};
  mask.dtype = DType::kBool;
  mask.bytes = {0, 1};
  response.outputs.push_back(mask);
  json answer = json::parse(infer_response_json("m\"q", parsed, signature(), response));
  EXPECT_EQ(answer["model_name"], "m\"q");
  const json& data = answer["outputs"][0]["data"];
  ASSERT_EQ(data.size(), 6u);
  EXPECT_TRUE(data[1].is_null());
  EXPECT_TRUE(data[2].is_null());
  for (size_t i : {0u, 3u, 4u, 5u}) {
    EXPECT_EQ(data[i].get<float>(), values[i]) << i << ": " << data[i].dump();
  }
  EXPECT_EQ(answer["outputs"][1]["data"], json::parse("[false, true]"));
}

// Note [Response numbers]: FP32 answers go through write_json_float (nine
// digits: 0.1f is 0.100000001, where the shortest form is 0.1).
TEST(KserveProtocol, ResponseFloatsAreWrittenInNineDigits) {
  InferRequest parsed = parse_infer_request(good_request().dump(), signature(), 4);
  Response response;
  response.outputs.push_back(
      HostRows::from_values<float>({0.1f, -0.5f, 3.0f, 0x1p-20f, 1e10f, 0.0f}, {2, 3}));
  HostRows mask;
  mask.shape = {2, 1};
  mask.dtype = DType::kBool;
  mask.bytes = {0, 1};
  response.outputs.push_back(mask);
  const std::string text = infer_response_json("m", parsed, signature(), response);
  EXPECT_NE(text.find("[0.100000001,-0.5,3,9.53674316e-7,1e10,0]"), std::string::npos) << text;
}

// A body in the binary tensor data extension: JSON, then the raw bytes of
// the inputs that give binary_data_size, in the order they are listed.
std::string binary_body(const json& header, const std::string& bytes, size_t* json_length) {
  std::string text = header.dump();
  *json_length = text.size();
  return text + bytes;
}

TEST(KserveProtocol, BinaryInputsAndOutputsFollowTheJson) {
  json header = json::parse(R"({"inputs": [
      {"name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {"binary_data_size": 24}},
      {"name": "ids", "shape": [2, 2], "datatype": "INT64", "data": [1, 2, 3, 4]}],
      "outputs": [{"name": "y", "parameters": {"binary_data": true}}, {"name": "mask"}]})");
  const std::vector<float> x = {1.5f, -2, 3, 4, 5, 6.25f};
  std::string bytes(reinterpret_cast<const char*>(x.data()), 24);
  size_t length = 0;
  std::string body = binary_body(header, bytes, &length);
  InferRequest parsed = parse_infer_request(body, signature(), 4, length);
  EXPECT_EQ(parsed.request.inputs()[0].values<float>(), x);
  EXPECT_EQ(parsed.binary, (std::vector<bool>{true, false}));

  Response response;
  response.outputs.push_back(HostRows::from_values<float>(x, {2, 3}));
  HostRows mask;
  mask.shape = {2, 1};
  mask.dtype = DType::kBool;
  mask.bytes = {1, 0};
  response.outputs.push_back(mask);
  size_t answer_length = 0;
  std::string answer = infer_response_json("m", parsed, signature(), response, &answer_length);
  ASSERT_GT(answer_length, 0u);
  ASSERT_EQ(answer.size(), answer_length + 24);
  json answer_json = json::parse(answer.substr(0, answer_length));
  EXPECT_EQ(answer_json["outputs"][0]["parameters"]["binary_data_size"], 24);
  EXPECT_FALSE(answer_json["outputs"][0].contains("data"));
  EXPECT_EQ(answer_json["outputs"][1]["data"], json::parse("[true, false]"));
  EXPECT_EQ(answer.substr(answer_length), bytes);

  // Without binary outputs the answer is JSON alone.
  InferRequest plain = parse_infer_request(good_request().dump(), signature(), 4);
  infer_response_json("m", plain, signature(), response, &answer_length);
  EXPECT_EQ(answer_length, 0u);
}

TEST(KserveProtocol, BinaryBodiesThatDoNotAddUpAreRefused) {
  json header = json::parse(R"({"inputs": [
      {"name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {"binary_data_size": 24}},
      {"name": "ids", "shape": [2, 2], "datatype": "INT64", "data": [1, 2, 3, 4]}]})");
  auto error = [&](const json& h, size_t bytes, std::optional<size_t> length_override = {}) {
    size_t length = 0;
    std::string body = binary_body(h, std::string(bytes, '\0'), &length);
    try {
      parse_infer_request(body, signature(), 4, length_override ? *length_override : length);
    } catch (const ProtocolError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(header, 20).find("only 20 binary bytes are left"), std::string::npos);
  EXPECT_NE(error(header, 30).find("6 bytes after the JSON belong to no input"), std::string::npos);
  EXPECT_NE(error(header, 24, 100000).find("beyond the body"), std::string::npos);
  json wrong = header;
  wrong["inputs"][0]["parameters"]["binary_data_size"] = 20;
  EXPECT_NE(error(wrong, 20).find("holds 24"), std::string::npos);
  json both = header;
  both["inputs"][0]["data"] = json::array();
  EXPECT_NE(error(both, 24).find("not both"), std::string::npos);
  try {
    parse_infer_request(header.dump(), signature(), 4);
    FAIL() << "binary_data_size without the header was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("Inference-Header-Content-Length"), std::string::npos);
  }
}

TEST(KserveProtocol, MetadataNamesTensorsWithABatchDimension) {
  json meta = model_metadata("m", signature(), 8);
  EXPECT_EQ(meta["inputs"][1], json::parse(R"({"name":"ids","datatype":"INT64","shape":[-1,2]})"));
  EXPECT_EQ(meta["parameters"]["max_batch_size"], 8);
}

// Random edits of a valid request: each parses or throws ProtocolError.
TEST(KserveProtocol, RandomMutationsEndInSuccessOrProtocolError) {
  const std::string valid = good_request().dump();
  const uint32_t seed = 77;
  std::mt19937 random(seed);
  const std::string alphabet = "0123456789[]{}\",:-.eE truefalsnul";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string body = valid;
    for (int m = 0; m < 1 + static_cast<int>(random() % 3); ++m) {
      size_t at = random() % body.size();
      if (random() % 2) {
        body[at] = alphabet[random() % alphabet.size()];
      } else {
        body.erase(at, 1 + random() % 4);
        if (body.empty()) body = "{";
      }
    }
    try {
      parse_infer_request(body, signature(), 4);
    } catch (const ProtocolError&) {
    } catch (const std::exception& error) {
      FAIL() << "seed " << seed << " trial " << trial << ": " << error.what() << "\n" << body;
    }
  }
}

// Note [Requests in the common layout]: a body the common layout takes reads
// as the same request through the tree, and parse_infer_request() gives the
// tree's request or the tree's refusal for every body, common or not.
TEST(KserveProtocol, CommonLayoutReadsAsTheTree) {
  struct Outcome {
    std::optional<InferRequest> request;
    std::string error;
  };
  auto by_tree = [](const std::string& body, std::optional<size_t> length) {
    Outcome outcome;
    try {
      const std::string_view text(body.data(), std::min(body.size(), length.value_or(body.size())));
      RequestDocument document = read_request_document(text, 4 * (3 + 2), std::nullopt);
      outcome.request = parse_infer_request_from_document(document, body, signature(), 4, length);
    } catch (const ProtocolError& error) {
      outcome.error = error.what();
    }
    return outcome;
  };
  auto same = [](const InferRequest& a, const InferRequest& b) {
    if (a.id != b.id || a.outputs != b.outputs || a.binary != b.binary ||
        a.request.rows() != b.request.rows() ||
        a.request.inputs().size() != b.request.inputs().size()) {
      return false;
    }
    for (size_t k = 0; k < a.request.inputs().size(); ++k) {
      const HostRows& x = a.request.inputs()[k];
      const HostRows& y = b.request.inputs()[k];
      if (x.shape != y.shape || x.dtype != y.dtype || x.bytes != y.bytes) return false;
    }
    return true;
  };
  const std::vector<float> x = {1.5f, -2, 3, 4, 5, 6.25f};
  const std::string x_bytes(reinterpret_cast<const char*>(x.data()), 24);
  std::vector<std::pair<std::string, std::optional<size_t>>> bodies = {
      {good_request().dump(), std::nullopt},
      {good_request().dump(2), std::nullopt},
      {R"({ "inputs" : [ {"shape":[2,3],"name":"x","data":[[1,2,3],[4,5,6e-1]],"datatype":"FP32"},)"
       R"({"datatype":"INT64","data":[7,8,9,-10],"name":"ids","shape":[2,2]} ],)"
       R"("outputs":[{"name":"mask"},{"name":"y","parameters":{"binary_data":true}}],)"
       R"("parameters":{"binary_data_output":false},"id":"a b"})",
       std::nullopt}};
  const std::string header =
      R"({"id":"7","inputs":[{"name":"x","shape":[2,3],"datatype":"FP32",)"
      R"("parameters":{"binary_data_size":24}},{"name":"ids","shape":[2,2],"datatype":"INT64",)"
      R"("data":[1,2,3,4]}],"parameters":{"binary_data_output":true},)"
      R"("outputs":[{"name":"y"},{"parameters":{"binary_data":false},"name":"mask"}]})";
  bodies.push_back({header + x_bytes, header.size()});
  for (const auto& [body, length] : bodies) {  // these take the common layout
    std::optional<InferRequest> common = parse_common_infer_request(body, signature(), 4, length);
    ASSERT_TRUE(common.has_value()) << body;
    Outcome tree = by_tree(body, length);
    ASSERT_TRUE(tree.request.has_value()) << tree.error << "\n" << body;
    EXPECT_TRUE(same(*common, *tree.request)) << body;
  }
  const uint32_t seed = 78;
  std::mt19937 random(seed);
  const std::string alphabet = "0123456789[]{}\",:-.eE truefalsnulxidsyFP\\\x7f";
  int common_taken = 0, refused = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const auto& [valid, valid_length] = bodies[random() % bodies.size()];
    std::string body = valid;
    std::optional<size_t> length = valid_length;
    const size_t text_end = length.value_or(body.size());
    for (int m = 0; m < 1 + static_cast<int>(random() % 3); ++m) {
      const size_t at = random() % text_end;
      if (random() % 3 != 0) {
        body[at] = alphabet[random() % alphabet.size()];
      } else {
        const size_t erased = std::min<size_t>(1 + random() % 4, text_end - at);
        body.erase(at, erased);
        if (length) *length -= erased;
        if (body.empty()) body = "{";
        break;  // text_end moved
      }
    }
    std::optional<InferRequest> common = parse_common_infer_request(body, signature(), 4, length);
    Outcome tree = by_tree(body, length);
    if (common) {
      ++common_taken;
      ASSERT_TRUE(tree.request.has_value())
          << "seed " << seed << " trial " << trial << ": the tree refused what the common "
          << "layout took: " << tree.error << "\n"
          << body;
      EXPECT_TRUE(same(*common, *tree.request)) << "seed " << seed << " trial " << trial << body;
    }
    // parse_infer_request: the tree's request, or its refusal word for word.
    try {
      InferRequest parsed = parse_infer_request(body, signature(), 4, length);
      ASSERT_TRUE(tree.request.has_value()) << "seed " << seed << " trial " << trial << body;
      EXPECT_TRUE(same(parsed, *tree.request)) << "seed " << seed << " trial " << trial << body;
    } catch (const ProtocolError& error) {
      ++refused;
      EXPECT_EQ(error.what(), tree.error) << "seed " << seed << " trial " << trial << body;
    }
  }
  EXPECT_GT(common_taken, 1000) << "the mutations left too few bodies in the common layout";
  EXPECT_GT(refused, 1000);
}

TEST(KserveProtocol, ErrorJsonReplacesInvalidUtf8) {
  // Note [Refusals are valid JSON]: dump() threw on these bytes and aborted the server.
  const std::string text = error_json("no route GET /\xff\xfe; id \"\xc3\"");
  const std::string message = json::parse(text)["error"];
  EXPECT_EQ(message.rfind("no route GET /\ufffd", 0), 0u) << message;
  // An id of invalid UTF-8 is refused naming the body, as valid JSON.
  const std::string refused = error_of(std::string("{\"id\": \"\xff\", \"inputs\": []}"));
  EXPECT_NE(refused.find("not valid JSON"), std::string::npos) << refused;
  EXPECT_NO_THROW(json::parse(error_json(refused)));
}

// A field of /proc/self/status in bytes (VmRSS, VmHWM).
size_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) << 10;
  }
  return 0;
}

TEST(KserveProtocol, LargeFloatBodyCostsItsRowsNotAValuePerElement) {
  // Note [Request memory bounded by the model]: an FP32 request's numbers go
  // straight into its row bytes; as 16-byte values beside the rows a body of
  // short numbers took about 5x its size more (issue 35, case 6).
  ModelSignature wide;
  wide.inputs.push_back({"x", {512}, DType::kF32, 2048});
  wide.outputs.push_back({"y", {512}, DType::kF32, 2048});
  const int64_t rows = 4096;
  std::string body =
      R"({"inputs": [{"name": "x", "shape": [4096, 512], "datatype": "FP32", "data": [)";
  body.reserve(body.size() + rows * 512 * 4 + 8);
  for (int64_t e = 0; e < rows * 512; ++e) body += e ? ",0.5" : "0.5";
  body += "]}]}";
  {
    std::ofstream clear_refs("/proc/self/clear_refs");
    clear_refs << "5";  // VmHWM back to VmRSS
  }
  const size_t before = status_bytes("VmRSS");
  InferRequest parsed = parse_infer_request(body, wide, rows);
  const size_t growth = status_bytes("VmHWM") - before;
  ASSERT_EQ(parsed.request.inputs()[0].bytes.size(), size_t(rows) * 512 * 4);
  EXPECT_EQ(parsed.request.inputs()[0].values<float>()[12345], 0.5f);
  const double factor = double(growth) / double(body.size());
  std::printf("peak growth parsing a %.1f MiB FP32 body: %.2fx the body (rows: %.2fx)\n",
              body.size() / 1048576.0, factor, double(rows * 512 * 4) / double(body.size()));
  EXPECT_LT(factor, 1.5) << "a value per element is kept beside the rows again";
}

TEST(KserveProtocol, LargeIntegerBodyCostsItsRowsNotAValuePerElement) {
  // Note [Request memory bounded by the model]: an INT64 request's numbers go
  // straight into its row bytes (8 a value); as 16-byte values beside the rows
  // a body of one-digit numbers took about 12x its size.
  ModelSignature ids;
  ids.inputs.push_back({"tokens", {512}, DType::kI64, 4096});
  ids.outputs.push_back({"y", {512}, DType::kF32, 2048});
  const int64_t rows = 4096;
  std::string body =
      R"({"inputs": [{"name": "tokens", "shape": [4096, 512], "datatype": "INT64", "data": [)";
  body.reserve(body.size() + rows * 512 * 2 + 8);
  for (int64_t e = 0; e < rows * 512; ++e) body += e ? ",7" : "7";
  body += "]}]}";
  {
    std::ofstream clear_refs("/proc/self/clear_refs");
    clear_refs << "5";  // VmHWM back to VmRSS
  }
  const size_t before = status_bytes("VmRSS");
  InferRequest parsed = parse_infer_request(body, ids, rows);
  const size_t growth = status_bytes("VmHWM") - before;
  const size_t row_bytes = size_t(rows) * 512 * 8;
  ASSERT_EQ(parsed.request.inputs()[0].bytes.size(), row_bytes);
  EXPECT_EQ(parsed.request.inputs()[0].values<int64_t>()[54321], 7);
  std::printf("peak growth parsing a %.1f MiB INT64 body: %.2fx the body (rows: %.2fx)\n",
              body.size() / 1048576.0, double(growth) / double(body.size()),
              double(row_bytes) / double(body.size()));
  EXPECT_LT(double(growth), 1.25 * double(row_bytes))
      << "a value per element is kept beside the rows again";
}

}  // namespace
}  // namespace grove::serving
