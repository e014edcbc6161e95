// Configurations from a given environment only, so that files on the machine cannot change them.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "common/config.h"

namespace rankmap::testing {

// Reads `env` and no file (the system file does not exist, the user file is off).
inline Config::LoadOptions isolatedLoad(std::map<std::string, std::string> env = {}) {
  Config::LoadOptions o;
  o.env = std::move(env);
  o.systemFile = "/nonexistent/rankmap.conf";
  o.userFile = "";
  return o;
}

inline Config configFrom(std::map<std::string, std::string> env) {
  return Config::load(isolatedLoad(std::move(env)));
}

}  // namespace rankmap::testing
