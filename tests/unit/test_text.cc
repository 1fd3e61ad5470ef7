// SPDX-License-Identifier: Apache-2.0
//
// Text from outside made safe where it leaves the daemon (daemon/core/
// text.h, json_text.h, log.h): UTF-8 validation, the printable form used in
// log lines and client messages, JSON that survives invalid UTF-8, and the
// log sink that escapes a line a peer tried to break.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "daemon/core/json_text.h"
#include "daemon/core/log.h"
#include "daemon/core/text.h"

namespace gsync {
namespace {

TEST(Utf8, ValidAndInvalidSequences) {
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("status"));
  EXPECT_TRUE(valid_utf8("h\xc3\xa9t\xc3\xa9"));        // U+00E9
  EXPECT_TRUE(valid_utf8("\xe2\x82\xac"));              // U+20AC
  EXPECT_TRUE(valid_utf8("\xf0\x9f\x98\x80"));          // U+1F600
  EXPECT_TRUE(valid_utf8("\xf4\x8f\xbf\xbf"));          // U+10FFFF
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));             // U+D800, a surrogate (issue #15)
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));                 // overlong '/'
  EXPECT_FALSE(valid_utf8("\xe0\x80\xaf"));             // overlong, 3 bytes
  EXPECT_FALSE(valid_utf8("\xf0\x80\x80\xaf"));         // overlong, 4 bytes
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));         // past U+10FFFF
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("\xc3"));                     // cut short
  EXPECT_FALSE(valid_utf8("\xe2\x82"));
  EXPECT_FALSE(valid_utf8("a\x80" "b"));                // a lone continuation byte
}

TEST(Printable, EscapesControlsBackslashAndInvalidBytes) {
  EXPECT_EQ(printable("plain text"), "plain text");
  EXPECT_EQ(printable("h\xc3\xa9"), "h\xc3\xa9");
  EXPECT_EQ(printable("a\nb\r\tc"), "a\\nb\\r\\tc");
  EXPECT_EQ(printable("back\\slash"), "back\\\\slash");
  EXPECT_EQ(printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(printable("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(printable("\xc2\x85"), "\\xc2\\x85");  // U+0085, a C1 control (NEL)
  EXPECT_EQ(printable("\x7f"), "\\x7f");
  EXPECT_TRUE(is_printable("h\xc3\xa9t\xc3\xa9 ok"));
  EXPECT_FALSE(is_printable("a\nb"));
  EXPECT_FALSE(is_printable("\xff"));
}

TEST(Printable, CutsAtACharacterBoundaryAndSaysSo) {
  EXPECT_EQ(printable("abcdef", 6), "abcdef");
  EXPECT_EQ(printable("abcdefg", 6), "abc...");
  // Three 2-byte characters in 7 bytes: the cut never splits one.
  std::string cut = printable("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 7);
  EXPECT_EQ(cut, "\xc3\xa9\xc3\xa9...");
  EXPECT_TRUE(valid_utf8(cut));
  // Nor an escape.
  EXPECT_EQ(printable("\x01\x02\x03", 9), "\\x01...");
  std::string big(100000, '\xff');
  EXPECT_LE(printable(big, 240).size(), 240u);
}

TEST(JsonText, InvalidUtf8BecomesReplacementCharacters) {
  nlohmann::json doc{{"error", "unknown admin command '\xed\xa0\x80'"}};
  // What the admin socket did before json_text: dump() throws type_error.
  EXPECT_THROW((void)doc.dump(), nlohmann::json::type_error);
  std::string text;
  ASSERT_NO_THROW(text = json_text(doc));
  auto back = nlohmann::json::parse(text);
  EXPECT_EQ(back["error"], "unknown admin command '\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd'");
}

// Collects what reaches the real sink.
class Capture : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> lines;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}
};

TEST(PrintableSink, AForgedLineStaysOneEscapedLine) {
  auto capture = std::make_shared<Capture>();
  spdlog::logger logger("test", std::make_shared<PrintableSink>(capture));
  logger.warn("host h2 reported: {}", "oops\n[2024-01-01 00:00:00.000] [info] all is well\xff");
  logger.info("{}", "nothing to escape: h\xc3\xa9");
  ASSERT_EQ(capture->lines.size(), 2u);
  EXPECT_EQ(capture->lines[0],
            "host h2 reported: oops\\n[2024-01-01 00:00:00.000] [info] all is well\\xff");
  EXPECT_EQ(capture->lines[1], "nothing to escape: h\xc3\xa9");
}

TEST(PrintableSink, WrapsTheDefaultLoggerOnce) {
  auto before = spdlog::default_logger()->sinks().size();
  make_log_printable();
  make_log_printable();
  auto& sinks = spdlog::default_logger()->sinks();
  ASSERT_EQ(sinks.size(), before);
  for (auto& s : sinks) EXPECT_NE(std::dynamic_pointer_cast<PrintableSink>(s), nullptr);
}

}  // namespace
}  // namespace gsync
