// `rankmap config`: prints every registered RANKMAP_* setting with its value, source and doc.
#include <cstdint>
#include <cstdio>

#include <fmt/format.h>

#include "cli/command.h"

namespace rankmap::cli {

void registerConfigCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  auto* cmd = app.add_subcommand("config", "Print every RANKMAP_* setting: value, source, doc");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([&ctx, &run, json] {
    run = [&ctx, json] {
      const Config& cfg = ctx.config;
      // "int 1 to 64", "int >= 1": the type with the range a setting declares.
      auto typeText = [](const SettingInfo& s) {
        std::string t(settingTypeName(s.type));
        if (s.range)
          t += s.range->second == INT64_MAX
                   ? fmt::format(" >= {}", s.range->first)
                   : fmt::format(" {} to {}", s.range->first, s.range->second);
        return t;
      };
      if (*json) {
        Json arr = Json::array();
        for (const auto& s : settingRegistry()) {
          Json one = {{"name", s.name},
                      {"type", settingTypeName(s.type)},
                      {"value", cfg.valueText(s.id)},
                      {"default", s.defaultValue},
                      {"source", cfg.originText(s.id)},
                      {"doc", s.doc}};
          if (s.range) {
            one["min"] = s.range->first;
            if (s.range->second != INT64_MAX) one["max"] = s.range->second;
          }
          arr.push_back(one);
        }
        fmt::print("{}\n", arr.dump(1));
        return 0;
      }
      for (const auto& s : settingRegistry()) {
        fmt::print("{}={}\n", s.name, cfg.valueText(s.id));
        fmt::print("    {} ({}, default {:?}, from {})\n", s.doc, typeText(s),
                   std::string(s.defaultValue), cfg.originText(s.id));
      }
      for (const auto& u : cfg.unknownNames())
        fmt::print(stderr, "rankmap config: warning: unknown setting {}\n", u);
      return 0;
    };
  });
}

}  // namespace rankmap::cli
