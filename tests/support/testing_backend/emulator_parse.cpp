// Parsing the emulated shell subset. Anything outside it makes the whole script unparsed
// (nullopt), never half-understood: a fake that guessed at `$(…)` would run something other
// than what a guest runs.
#include <cctype>
#include <set>

#include "emulator.hpp"

namespace airlock::testing::emulation {
namespace {

enum class TokenKind { word, separator, and_then, pipe, redirection };

struct Token {
  TokenKind kind = TokenKind::word;
  Word word;
  Redirection redirection;  // kind == redirection (target filled by the next word)
};

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  // False when the text leaves the subset.
  bool run(std::vector<Token>& tokens) {
    while (position_ < text_.size()) {
      const char c = text_[position_];
      if (c == ' ' || c == '\t') {
        ++position_;
        continue;
      }
      if (c == '#') return false;  // a comment
      if (c == '\n' || c == ';') {
        if (c == ';' && peek(1) == ';') return false;  // `;;` belongs to case
        tokens.push_back({TokenKind::separator, {}, {}});
        ++position_;
        continue;
      }
      if (c == '&') {
        if (peek(1) != '&') return false;  // a background job
        tokens.push_back({TokenKind::and_then, {}, {}});
        position_ += 2;
        continue;
      }
      if (c == '|') {
        if (peek(1) == '|') return false;  // `||`
        tokens.push_back({TokenKind::pipe, {}, {}});
        ++position_;
        continue;
      }
      if (c == '(' || c == ')' || c == '`') return false;
      if (c == '<' || c == '>') {
        if (!redirection(tokens)) return false;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        // Digits right before a redirection operator name a descriptor (`2>`): not emulated,
        // and never to be read as an argument "2" with stdout redirected.
        std::size_t end = position_;
        while (end < text_.size() && std::isdigit(static_cast<unsigned char>(text_[end]))) ++end;
        if (end < text_.size() && (text_[end] == '<' || text_[end] == '>')) return false;
      }
      Token token;
      if (!word(token.word)) return false;
      if (token.word.parts.size() == 1 && !token.word.parts[0].quoted &&
          token.word.parts[0].text == "!") {
        return false;  // `!`: negation is not emulated
      }
      tokens.push_back(std::move(token));
    }
    return true;
  }

 private:
  char peek(std::size_t ahead) const {
    return position_ + ahead < text_.size() ? text_[position_ + ahead] : '\0';
  }

  bool redirection(std::vector<Token>& tokens) {
    Token token;
    token.kind = TokenKind::redirection;
    const char c = text_[position_];
    if (c == '<') {
      if (peek(1) == '<' || peek(1) == '&' || peek(1) == '>') return false;  // heredocs et al.
      token.redirection.fd = 0;
      token.redirection.operation = Redirection::Operation::read;
      ++position_;
    } else {
      token.redirection.fd = 1;
      if (peek(1) == '>') {
        token.redirection.operation = Redirection::Operation::append;
        position_ += 2;
      } else if (peek(1) == '&') {
        position_ += 2;
        if (!std::isdigit(static_cast<unsigned char>(peek(0)))) return false;
        token.redirection.operation = Redirection::Operation::duplicate;
        token.redirection.duplicate_of = text_[position_] - '0';
        ++position_;
      } else if (peek(1) == '|') {
        return false;
      } else {
        token.redirection.operation = Redirection::Operation::write;
        ++position_;
      }
    }
    tokens.push_back(std::move(token));
    return true;
  }

  void literal(Word& out, char c, bool quoted) {
    if (out.parts.empty() || out.parts.back().kind != WordPart::Kind::literal ||
        out.parts.back().quoted != quoted) {
      out.parts.push_back({WordPart::Kind::literal, {}, quoted});
    }
    out.parts.back().text += c;
  }

  // `$N` or `$$` inside double quotes, at position_ (which points at the '$'). False for any
  // other parameter: `$@`, `$#`, `${…}`, `$(…)`, names.
  bool parameter(Word& out) {
    const char next = peek(1);
    if (!std::isdigit(static_cast<unsigned char>(next)) && next != '$') return false;
    out.parts.push_back({WordPart::Kind::parameter, std::string(1, next), true});
    position_ += 2;
    return true;
  }

  bool word(Word& out) {
    bool first = true;
    while (position_ < text_.size()) {
      const char c = text_[position_];
      if (c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '<' ||
          c == '>' || c == '(' || c == ')') {
        break;
      }
      if (c == '`') return false;
      if (c == '\'') {
        const std::size_t end = text_.find('\'', position_ + 1);
        if (end == std::string_view::npos) return false;
        out.parts.push_back({WordPart::Kind::literal,
                             std::string(text_.substr(position_ + 1, end - position_ - 1)), true});
        position_ = end + 1;
      } else if (c == '"') {
        if (!double_quoted(out)) return false;
      } else if (c == '\\' || c == '$') {
        return false;  // backslashes and unquoted expansions
      } else {
        // Globs and tildes would need expansion the emulator does not do.
        if (c == '*' || c == '?' || c == '[' || c == ']') return false;
        if (c == '~' && first) return false;
        literal(out, c, false);
        ++position_;
      }
      first = false;
    }
    if (out.parts.empty()) out.parts.push_back({WordPart::Kind::literal, {}, true});
    return true;
  }

  bool double_quoted(Word& out) {
    ++position_;  // opening quote
    bool closed = false;
    const std::size_t parts_before = out.parts.size();
    while (position_ < text_.size()) {
      const char c = text_[position_];
      if (c == '"') {
        ++position_;
        closed = true;
        break;
      }
      if (c == '`' || c == '\\') return false;
      if (c == '$') {
        if (!parameter(out)) return false;
        continue;
      }
      literal(out, c, true);
      ++position_;
    }
    // "" is an empty word, not no word.
    if (out.parts.size() == parts_before) out.parts.push_back({WordPart::Kind::literal, {}, true});
    return closed;
  }

  std::string_view text_;
  std::size_t position_ = 0;
};

bool is_reserved_word(const std::string& word) {
  static const std::set<std::string> kReserved = {
      "if",    "then",  "else", "elif", "fi", "do", "done",     "case",   "esac",
      "while", "until", "for",  "in",   "{",  "}",  "function", "select", "[["};
  return kReserved.contains(word);
}

bool is_assignment(const std::string& word) {
  if (word.empty() || !is_name_start(word[0])) return false;
  for (std::size_t i = 1; i < word.size(); ++i) {
    if (word[i] == '=') return true;
    if (!std::isalnum(static_cast<unsigned char>(word[i])) && word[i] != '_') return false;
  }
  return false;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  std::optional<Script> run() {
    Script script;
    skip_separators();
    while (position_ < tokens_.size()) {
      AndList list;
      if (!and_list(list)) return std::nullopt;
      script.lists.push_back(std::move(list));
      if (position_ < tokens_.size() && tokens_[position_].kind != TokenKind::separator) {
        return std::nullopt;
      }
      skip_separators();
    }
    return script;
  }

 private:
  void skip_separators() {
    while (position_ < tokens_.size() && tokens_[position_].kind == TokenKind::separator) {
      ++position_;
    }
  }

  bool and_list(AndList& list) {
    Pipeline pipeline;
    if (!parse_pipeline(pipeline)) return false;
    list.pipelines.push_back(std::move(pipeline));
    while (position_ < tokens_.size() && tokens_[position_].kind == TokenKind::and_then) {
      ++position_;
      Pipeline next;
      if (!parse_pipeline(next)) return false;
      list.pipelines.push_back(std::move(next));
    }
    return true;
  }

  bool parse_pipeline(Pipeline& pipeline) {
    while (true) {
      SimpleCommand command;
      if (!simple(command)) return false;
      pipeline.commands.push_back(std::move(command));
      if (position_ < tokens_.size() && tokens_[position_].kind == TokenKind::pipe) {
        ++position_;
        continue;
      }
      return true;
    }
  }

  bool simple(SimpleCommand& command) {
    while (position_ < tokens_.size()) {
      Token& token = tokens_[position_];
      if (token.kind == TokenKind::word) {
        if (command.words.empty()) {
          const auto text = token.word.literal();
          const bool unquoted = !token.word.parts.empty() && !token.word.parts[0].quoted;
          if (text && unquoted && (is_reserved_word(*text) || is_assignment(*text))) return false;
        }
        command.words.push_back(std::move(token.word));
        ++position_;
      } else if (token.kind == TokenKind::redirection) {
        Redirection redirection = token.redirection;
        ++position_;
        if (redirection.operation != Redirection::Operation::duplicate) {
          if (position_ >= tokens_.size() || tokens_[position_].kind != TokenKind::word) {
            return false;
          }
          redirection.target = std::move(tokens_[position_].word);
          ++position_;
        }
        command.redirections.push_back(std::move(redirection));
      } else {
        break;
      }
    }
    return !command.words.empty();
  }

  std::vector<Token> tokens_;
  std::size_t position_ = 0;
};

}  // namespace

std::optional<std::string> Word::literal() const {
  std::string text;
  for (const auto& part : parts) {
    if (part.kind != WordPart::Kind::literal) return std::nullopt;
    text += part.text;
  }
  return text;
}

std::optional<Script> parse_script(std::string_view text) {
  std::vector<Token> tokens;
  if (!Lexer(text).run(tokens)) return std::nullopt;
  return Parser(std::move(tokens)).run();
}

bool is_emulated_command(std::string_view name) {
  static const std::set<std::string, std::less<>> kCommands = {
      "printf", "echo",  "cat", "test", "pwd",    "sleep", "ln",   "mkdir",  "rm", "mv",
      "true",   "false", ":",   "exit", "base64", "wc",    "head", "mkfifo", "ls", "chmod"};
  return kCommands.contains(name);
}

bool script_is_emulated(const Script& script) {
  for (const auto& list : script.lists) {
    for (const auto& pipeline : list.pipelines) {
      for (const auto& command : pipeline.commands) {
        const auto name = command.words.front().literal();
        if (!name || !is_emulated_command(*name)) return false;
      }
    }
  }
  return true;
}

}  // namespace airlock::testing::emulation
