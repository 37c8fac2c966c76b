// A YAML configuration file as rfos reads them: a mapping whose keys must all be known (a typo must not
// silently fall back to a default). yaml-cpp's headers come with this one: include it only where a config is
// parsed (server/config.cc, agent/agent.cc).
//
// Thread-safety: pure functions.
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "common/status.h"

namespace rfos {

// The file's root: a null node for an empty file. Errors: kNotFound (cannot be read), kInvalidArgument
// (syntax, not a mapping, a key not in `known`).
Result<YAML::Node> load_yaml_mapping(const std::string& path, std::initializer_list<std::string_view> known);
// The keys of `node` (a mapping) must be in `known`; `what` names it in the error ("tenant", "qos").
Status check_yaml_keys(const YAML::Node& node, std::initializer_list<std::string_view> known, const std::string& path,
                       const std::string& what);

}  // namespace rfos
