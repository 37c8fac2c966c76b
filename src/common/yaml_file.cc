#include "common/yaml_file.h"

#include <algorithm>

namespace rfos {

Status check_yaml_keys(const YAML::Node& node, std::initializer_list<std::string_view> known, const std::string& path,
                       const std::string& what) {
  if (!node.IsMap()) return error(StatusCode::kInvalidArgument, path + ": " + what + " must be a mapping");
  try {
    for (const auto& kv : node) {
      std::string key = kv.first.as<std::string>();
      if (std::find(known.begin(), known.end(), key) == known.end())
        return error(StatusCode::kInvalidArgument, path + ": unknown " + what + " key '" + key + "'");
    }
  } catch (const YAML::Exception& e) {
    return error(StatusCode::kInvalidArgument, "config file " + path + ": " + e.what());
  }
  return Status::ok();
}

Result<YAML::Node> load_yaml_mapping(const std::string& path, std::initializer_list<std::string_view> known) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return error(StatusCode::kNotFound, "config file " + path + " cannot be read");
  } catch (const YAML::Exception& e) {
    return error(StatusCode::kInvalidArgument, "config file " + path + ": " + e.what());
  }
  if (root.IsNull()) return root;
  if (!root.IsMap()) return error(StatusCode::kInvalidArgument, "config file " + path + " must be a mapping");
  RFOS_RETURN_IF_ERROR(check_yaml_keys(root, known, path, "config"));
  return root;
}

}  // namespace rfos
