// Reading JSON documents defensively, with errors that name the source, the JSON path and
// what was expected ("plan.json: at /permutation/3: expected an integer, got string").
//
// Contract: parseJson() never crashes on hostile input: it bounds size and nesting depth before
// handing the text to nlohmann::json. JsonReader is a cheap view (reference + path) and must not
// outlive the json value it reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rankmap {

using Json = nlohmann::json;

constexpr size_t kMaxJsonBytes = 1ull << 30;  // 1 GiB: room for a full 4096-host topology
constexpr int kMaxJsonDepth = 64;

// Throws InvalidInput("<source>: not valid JSON: ...") on bad syntax, excess depth or size.
Json parseJson(std::string_view text, std::string_view source);
// nlohmann's message without its "[json.exception.parse_error.101] " tag: "parse error at line
// 1, column 3: syntax error while parsing value - invalid literal; last read: 'x'".
std::string jsonErrorText(const std::exception& e);
// Reads a whole file (IoError naming it if unreadable) and parses it.
Json readJsonFile(const std::string& path);

class JsonReader {
 public:
  JsonReader(const Json& v, std::string_view source, std::string path = "")
      : v_(&v), source_(source), path_(std::move(path)) {}

  const Json& json() const { return *v_; }
  const std::string& path() const { return path_; }
  std::string_view source() const { return source_; }

  // Required object member; fails "missing field 'x' (expected <what>)".
  JsonReader at(std::string_view key, std::string_view what = "a value") const;
  // Optional member: nullopt when absent or null.
  std::optional<JsonReader> find(std::string_view key) const;
  // Array element; requires isArray().
  JsonReader at(size_t i) const;

  bool isNull() const { return v_->is_null(); }
  size_t arraySize() const;         // fails unless an array
  size_t arraySize(size_t expected) const;  // fails unless an array of exactly `expected`
  void expectObject() const;

  std::string str() const;
  std::string nonEmptyStr() const;
  double number() const;            // finite
  double nonNegative() const;       // finite, >= 0
  int64_t integer() const;
  int64_t integerIn(int64_t lo, int64_t hi) const;
  uint64_t unsignedInt() const;
  bool boolean() const;

  [[noreturn]] void fail(std::string_view expected) const;

 private:
  std::string describe() const;
  const Json* v_;
  std::string_view source_;
  std::string path_;
};

}  // namespace rankmap
