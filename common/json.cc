#include "common/json.h"

#include <cmath>

#include "common/error.h"
#include "common/files.h"

namespace rankmap {
namespace {

// Depth check that ignores brackets inside strings; O(n), no allocation.
void checkDepth(std::string_view text, std::string_view source) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\') ++i;
      else if (c == '"') inString = false;
      continue;
    }
    if (c == '"') inString = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw InvalidInput(fmt::format("{}: not valid JSON: nesting deeper than {} at byte {}",
                                       source, kMaxJsonDepth, i));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

std::string typeName(const Json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

}  // namespace

Json parseJson(std::string_view text, std::string_view source) {
  if (text.size() > kMaxJsonBytes)
    throw InvalidInput(fmt::format("{}: document of {} bytes exceeds the {} byte limit", source,
                                   text.size(), kMaxJsonBytes));
  checkDepth(text, source);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    throw InvalidInput(fmt::format("{}: not valid JSON: {}", source, jsonErrorText(e)));
  }
}

std::string jsonErrorText(const std::exception& e) {
  std::string_view w = e.what();
  if (w.rfind("[json.exception.", 0) == 0)
    if (auto end = w.find("] "); end != std::string_view::npos) w.remove_prefix(end + 2);
  return std::string(w);
}

Json readJsonFile(const std::string& path) {
  return parseJson(readFile(path, kMaxJsonBytes), path);
}

std::string JsonReader::describe() const { return path_.empty() ? "/" : path_; }

void JsonReader::fail(std::string_view expected) const {
  throw InvalidInput(fmt::format("{}: at {}: expected {}, got {}", source_, describe(), expected,
                                 typeName(*v_)));
}

void JsonReader::expectObject() const {
  if (!v_->is_object()) fail("an object");
}

JsonReader JsonReader::at(std::string_view key, std::string_view what) const {
  expectObject();
  auto it = v_->find(key);
  if (it == v_->end())
    throw InvalidInput(fmt::format("{}: at {}: missing field '{}' (expected {})", source_,
                                   describe(), key, what));
  return JsonReader(*it, source_, path_ + "/" + std::string(key));
}

std::optional<JsonReader> JsonReader::find(std::string_view key) const {
  expectObject();
  auto it = v_->find(key);
  if (it == v_->end() || it->is_null()) return std::nullopt;
  return JsonReader(*it, source_, path_ + "/" + std::string(key));
}

JsonReader JsonReader::at(size_t i) const {
  size_t n = arraySize();
  if (i >= n) RANKMAP_THROW(InternalError, "index {} out of range {} at {}", i, n, describe());
  return JsonReader((*v_)[i], source_, path_ + "/" + std::to_string(i));
}

size_t JsonReader::arraySize() const {
  if (!v_->is_array()) fail("an array");
  return v_->size();
}

size_t JsonReader::arraySize(size_t expected) const {
  size_t n = arraySize();
  if (n != expected)
    throw InvalidInput(fmt::format("{}: at {}: expected an array of {} elements, got {}", source_,
                                   describe(), expected, n));
  return n;
}

std::string JsonReader::str() const {
  if (!v_->is_string()) fail("a string");
  return v_->get<std::string>();
}

std::string JsonReader::nonEmptyStr() const {
  auto s = str();
  if (s.empty()) fail("a non-empty string");
  return s;
}

double JsonReader::number() const {
  if (!v_->is_number()) fail("a number");
  double d = v_->get<double>();
  if (!std::isfinite(d)) fail("a finite number");
  return d;
}

double JsonReader::nonNegative() const {
  double d = number();
  if (d < 0)
    throw InvalidInput(fmt::format("{}: at {}: expected a non-negative number, got {}", source_,
                                   describe(), d));
  return d;
}

int64_t JsonReader::integer() const {
  if (v_->is_number_integer()) return v_->get<int64_t>();
  if (v_->is_number_float()) {
    double d = v_->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
      return static_cast<int64_t>(d);
  }
  fail("an integer");
}

int64_t JsonReader::integerIn(int64_t lo, int64_t hi) const {
  int64_t v = integer();
  if (v < lo || v > hi)
    throw InvalidInput(fmt::format("{}: at {}: expected an integer in [{}, {}], got {}", source_,
                                   describe(), lo, hi, v));
  return v;
}

uint64_t JsonReader::unsignedInt() const {
  if (v_->is_number_unsigned()) return v_->get<uint64_t>();
  return static_cast<uint64_t>(integerIn(0, INT64_MAX));
}

bool JsonReader::boolean() const {
  if (!v_->is_boolean()) fail("a boolean");
  return v_->get<bool>();
}

}  // namespace rankmap
