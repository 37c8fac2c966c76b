// The XML request bodies S3 clients send (CompleteMultipartUpload, DeleteObjects): a small strict parser into a
// tree of elements and their text. No DTDs, no external entities (a hostile body can name no file and expand
// nothing); attributes are read past; depth and size bounded. Fuzzed (s3_fuzz).
//
// Thread-safety: pure.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rfos::s3 {

struct XmlElement {
  std::string name;  // without a namespace prefix
  std::string text;  // its character data, entities decoded (the children's left out)
  std::vector<XmlElement> children;

  // The first child named `name`, or null.
  const XmlElement* child(std::string_view name) const;
};

// The document's root element. kInvalidArgument (S3's MalformedXML) for anything else.
Result<XmlElement> parse_xml(std::string_view doc);

}  // namespace rfos::s3
