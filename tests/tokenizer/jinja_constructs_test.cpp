// Each construct template of tools/oracle/jinja_constructs.py, rendered by jinja2 with
// transformers' settings (tests/fixtures/chat/jinja2_constructs.json), must render to the same
// text here — or fail here too where jinja2 fails.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/template.h"

namespace {

using ojson = nlohmann::ordered_json;

TEST(JinjaConstructs, MatchJinja2) {
  std::ifstream f(std::filesystem::path(VTLLM_FIXTURES_DIR) / "chat/jinja2_constructs.json");
  ASSERT_TRUE(f) << "missing fixture";
  std::stringstream ss;
  ss << f.rdbuf();
  ojson doc = ojson::parse(ss.str());
  std::time_t fixed = doc["fixed_time"].get<int64_t>();
  int n = 0, errors = 0;
  for (const auto& c : doc["cases"]) {
    const std::string tpl = c["template"];
    SCOPED_TRACE("template: " + tpl);
    vtllm::jinja::RenderOptions opt;
    opt.clock = [fixed] { return fixed; };
    std::string got;
    std::string err;
    try {
      vtllm::jinja::Template t(tpl);
      got = t.Render(c["context"], opt);
    } catch (const vtllm::jinja::TemplateError& e) {
      err = e.what();
    }
    if (c.contains("rendered")) {
      EXPECT_EQ(err, "");
      EXPECT_EQ(got, c["rendered"].get<std::string>());
    } else {
      ++errors;
      EXPECT_NE(err, "") << "jinja2 raised " << c["error"] << ": " << c["message"] << " but we rendered '" << got << "'";
      if (c["error"] == "TemplateError") {  // raise_exception: the message must come through
        EXPECT_NE(err.find(c["message"].get<std::string>()), std::string::npos) << err;
      }
    }
    ++n;
  }
  EXPECT_GT(n, 150);
  EXPECT_GT(errors, 10);
}

}  // namespace
