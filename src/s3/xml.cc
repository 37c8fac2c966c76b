#include "s3/xml.h"

namespace rfos::s3 {

namespace {

constexpr size_t kMaxDepth = 16;
constexpr size_t kMaxElements = 100000;

class Parser {
 public:
  explicit Parser(std::string_view in) : in_(in) {}

  Result<XmlElement> document() {
    skip_space();
    if (in_.substr(at_).starts_with("<?xml")) {
      size_t end = in_.find("?>", at_);
      if (end == std::string_view::npos) return bad("an unterminated XML declaration");
      at_ = end + 2;
    }
    skip_misc();
    XmlElement root;
    RFOS_RETURN_IF_ERROR(element(&root, 0));
    skip_misc();
    if (at_ != in_.size()) return bad("content after the root element");
    return root;
  }

 private:
  Status bad(std::string what) { return error(StatusCode::kInvalidArgument, "malformed XML: " + what); }

  void skip_space() {
    while (at_ < in_.size() && (in_[at_] == ' ' || in_[at_] == '\t' || in_[at_] == '\r' || in_[at_] == '\n')) ++at_;
  }
  // Spaces and comments between elements.
  void skip_misc() {
    for (;;) {
      skip_space();
      if (!in_.substr(at_).starts_with("<!--")) return;
      size_t end = in_.find("-->", at_ + 4);
      at_ = end == std::string_view::npos ? in_.size() : end + 3;
    }
  }

  Result<std::string> name() {
    size_t start = at_;
    while (at_ < in_.size() && in_[at_] != '>' && in_[at_] != '/' && in_[at_] != ' ' && in_[at_] != '\t' &&
           in_[at_] != '\r' && in_[at_] != '\n' && in_[at_] != '=' && in_[at_] != '<')
      ++at_;
    if (at_ == start) return bad("an element without a name");
    std::string_view n = in_.substr(start, at_ - start);
    if (size_t colon = n.rfind(':'); colon != std::string_view::npos) n.remove_prefix(colon + 1);
    if (n.empty()) return bad("an element name with no local part ('prefix:')");
    return std::string(n);
  }

  Status entity(std::string* out) {
    size_t end = in_.find(';', at_);
    if (end == std::string_view::npos || end - at_ > 10) return bad("an unterminated entity");
    std::string_view e = in_.substr(at_ + 1, end - at_ - 1);
    at_ = end + 1;
    if (e == "amp")
      *out += '&';
    else if (e == "lt")
      *out += '<';
    else if (e == "gt")
      *out += '>';
    else if (e == "quot")
      *out += '"';
    else if (e == "apos")
      *out += '\'';
    else if (e.size() > 1 && e[0] == '#') {
      unsigned long cp = 0;
      bool hex = e[1] == 'x';
      std::string_view digits = e.substr(hex ? 2 : 1);
      if (digits.empty()) return bad("an empty character reference");
      for (char c : digits) {
        int v = c >= '0' && c <= '9'          ? c - '0'
                : hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
                : hex && c >= 'A' && c <= 'F' ? c - 'A' + 10
                                              : -1;
        if (v < 0) return bad("a malformed character reference");
        cp = cp * (hex ? 16 : 10) + static_cast<unsigned long>(v);
        if (cp > 0x10FFFF) return bad("a character reference out of range");
      }
      if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) return bad("a character reference to no character");
      // UTF-8.
      if (cp < 0x80) {
        *out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        *out += static_cast<char>(0xC0 | (cp >> 6));
        *out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        *out += static_cast<char>(0xE0 | (cp >> 12));
        *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        *out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        *out += static_cast<char>(0xF0 | (cp >> 18));
        *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        *out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      return bad("an unknown entity '&" + std::string(e) + ";'");
    }
    return Status::ok();
  }

  Status element(XmlElement* el, size_t depth) {
    if (depth > kMaxDepth) return bad("nested too deep");
    if (++elements_ > kMaxElements) return bad("too many elements");
    if (at_ >= in_.size() || in_[at_] != '<') return bad("an element expected");
    ++at_;
    if (at_ < in_.size() && (in_[at_] == '!' || in_[at_] == '?')) return bad("a declaration inside the document");
    RFOS_ASSIGN_OR_RETURN(el->name, name());
    // Attributes: read past, quoted values skipped whole.
    for (;;) {
      if (at_ >= in_.size()) return bad("an unterminated start tag");
      char c = in_[at_];
      if (c == '"' || c == '\'') {
        size_t end = in_.find(c, at_ + 1);
        if (end == std::string_view::npos) return bad("an unterminated attribute value");
        at_ = end + 1;
      } else if (c == '/') {
        if (at_ + 1 >= in_.size() || in_[at_ + 1] != '>') return bad("a stray '/' in a start tag");
        at_ += 2;
        return Status::ok();  // <empty/>
      } else if (c == '>') {
        ++at_;
        break;
      } else if (c == '<') {
        return bad("'<' in a start tag");
      } else {
        ++at_;
      }
    }
    for (;;) {
      if (at_ >= in_.size()) return bad("element <" + el->name + "> is not closed");
      char c = in_[at_];
      if (c == '&') {
        RFOS_RETURN_IF_ERROR(entity(&el->text));
      } else if (c != '<') {
        el->text += c;
        ++at_;
      } else if (in_.substr(at_).starts_with("<!--")) {
        size_t end = in_.find("-->", at_ + 4);
        if (end == std::string_view::npos) return bad("an unterminated comment");
        at_ = end + 3;
      } else if (in_.substr(at_).starts_with("<![CDATA[")) {
        size_t end = in_.find("]]>", at_ + 9);
        if (end == std::string_view::npos) return bad("an unterminated CDATA section");
        el->text.append(in_.substr(at_ + 9, end - at_ - 9));
        at_ = end + 3;
      } else if (in_.substr(at_).starts_with("</")) {
        at_ += 2;
        RFOS_ASSIGN_OR_RETURN(std::string closing, name());
        skip_space();
        if (closing != el->name || at_ >= in_.size() || in_[at_] != '>')
          return bad("<" + el->name + "> closed by </" + closing + ">");
        ++at_;
        return Status::ok();
      } else {
        el->children.emplace_back();
        RFOS_RETURN_IF_ERROR(element(&el->children.back(), depth + 1));
      }
    }
  }

  std::string_view in_;
  size_t at_ = 0;
  size_t elements_ = 0;
};

}  // namespace

const XmlElement* XmlElement::child(std::string_view n) const {
  for (const XmlElement& c : children)
    if (c.name == n) return &c;
  return nullptr;
}

Result<XmlElement> parse_xml(std::string_view doc) { return Parser(doc).document(); }

}  // namespace rfos::s3
