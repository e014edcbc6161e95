#include "common/json.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace rankmap {
namespace {

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(Json, SyntaxErrorNamesSource) {
  auto m = errorOf([] { parseJson("{\"a\": [1, 2", "x.json"); });
  EXPECT_NE(m.find("x.json: not valid JSON: parse error at line 1"), std::string::npos) << m;
  EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;  // the library's tag left out
}

TEST(Json, HostileNestingIsRejectedWithoutRecursion) {
  std::string deep(1'000'000, '[');
  auto m = errorOf([&] { parseJson(deep, "deep.json"); });
  EXPECT_NE(m.find("nesting deeper"), std::string::npos) << m;
  // Brackets inside strings do not count.
  std::string ok = "{\"s\": \"" + std::string(10'000, '[') + "\"}";
  EXPECT_NO_THROW(parseJson(ok, "ok.json"));
}

TEST(Json, ReaderErrorsNamePathAndExpectation) {
  auto doc = parseJson(R"({"hosts":[{"name":"a"},{"name":7}]})", "t.json");
  JsonReader r(doc, "t.json");
  auto m = errorOf([&] { r.at("hosts").at(1).at("name").str(); });
  EXPECT_NE(m.find("t.json: at /hosts/1/name: expected a string, got integer"), std::string::npos)
      << m;
  m = errorOf([&] { r.at("missing", "an array"); });
  EXPECT_NE(m.find("missing field 'missing' (expected an array)"), std::string::npos) << m;
  m = errorOf([&] { r.at("hosts").arraySize(3); });
  EXPECT_NE(m.find("expected an array of 3 elements, got 2"), std::string::npos) << m;
}

TEST(Json, NumbersAreCheckedForRangeAndSign) {
  auto doc = parseJson(R"({"neg":-1,"big":1e300,"frac":1.5,"int":4})", "n.json");
  JsonReader r(doc, "n.json");
  EXPECT_THROW(r.at("neg").nonNegative(), InvalidInput);
  EXPECT_THROW(r.at("frac").integer(), InvalidInput);
  EXPECT_THROW(r.at("big").integer(), InvalidInput);
  EXPECT_THROW(r.at("int").integerIn(5, 10), InvalidInput);
  EXPECT_EQ(r.at("int").integer(), 4);
  EXPECT_EQ(r.at("frac").number(), 1.5);
}

TEST(Json, MissingFileIsIoErrorNamingIt) {
  try {
    readJsonFile("/nonexistent/plan.json");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/plan.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace rankmap
