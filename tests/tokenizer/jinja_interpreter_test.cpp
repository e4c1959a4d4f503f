// Specification tests for the Jinja interpreter: expected outputs written from Jinja2's
// documented semantics (small constructs), and the error contract — malformed or unsupported
// templates fail with the template line, raise_exception's message comes through, and runaway
// templates hit limits instead of crashing.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/template.h"

namespace {

using ojson = nlohmann::ordered_json;
using vtllm::jinja::Template;

std::string R(const std::string& tpl, const ojson& ctx = ojson::object()) { return Template(tpl).Render(ctx); }

template <typename E>
std::string ErrorOf(const std::string& tpl, const ojson& ctx = ojson::object()) {
  try {
    R(tpl, ctx);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "NO EXCEPTION";
}

TEST(JinjaSpec, LoopVariables) {
  EXPECT_EQ(R("{% for x in 'abc' %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
              "{{ loop.revindex }} {% endfor %}"),
            "01TrueFalse33 12FalseFalse32 23FalseTrue31 ");
  EXPECT_EQ(R("{% for x in [1, 2, 3, 4] if x is even %}{{ loop.index }}/{{ loop.length }} {% endfor %}"), "1/2 2/2 ");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in [1, 2, 3]|reverse %}{{ x }}{% endfor %}"), "321");
  EXPECT_EQ(R("{% for x in [1, 2, 3][::-1] %}{{ x }}{% endfor %}"), "321");
  EXPECT_EQ(R("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}"), "3,7,");
  EXPECT_EQ(R("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "02");
}

TEST(JinjaSpec, ScopingFollowsJinja) {
  // A set inside a loop body does not leak out of the loop; namespaces carry state out.
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}"), "11 11 1");
  EXPECT_EQ(R("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  // `if` does not open a scope.
  EXPECT_EQ(R("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(R("{% set a %}x{{ 1 }}y{% endset %}{{ a }}|{{ a|length }}"), "x1y|3");
}

TEST(JinjaSpec, WhitespaceControlAsTransformersConfiguresIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it goes.
  EXPECT_EQ(R("{% if true %}\n    yes\n    {% endif %}\nafter"), "    yes\nafter");
  EXPECT_EQ(R("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(R("a\n  {%- if true %}b{% endif -%}\n\nc"), "abc");
  // {%+ keeps the indentation; a single trailing newline of the template is dropped.
  EXPECT_EQ(R("  {%+ if true %}x{% endif %}\n"), "  x");
  EXPECT_EQ(R("{{ 'x' }}\n{# comment #}\ny"), "x\ny");
}

TEST(JinjaSpec, ExpressionsWithPythonSemantics) {
  EXPECT_EQ(R("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 1.0 }}"),
            "3 -4 1 2 3.5 1024 2.0");
  EXPECT_EQ(R("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 2 }} {{ [1] + [2] }}"), "a1NoneTrue abab [1, 2]");
  EXPECT_EQ(R("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 'z' not in ['a'] }} {{ 1 == 1.0 }}"), "True True True True");
  EXPECT_EQ(R("{{ 0 or 'x' }} {{ 'y' and 0 }} {{ not [] }} {{ 'yes' if 0 else 'no' }}"), "x 0 True no");
  EXPECT_EQ(R("{{ {'a': [1, 'b', none, 1.5]} }} {{ (1,) }} {{ \"it's\" }}", ojson::object()),
            "{'a': [1, 'b', None, 1.5]} (1,) it's");
  EXPECT_EQ(R("{{ 'héllo'[1] }}{{ 'héllo'|length }}{{ 'héllo'[::-1] }}"), "é5olléh");
}

TEST(JinjaSpec, UndefinedBehavesAsJinjaDefault) {
  EXPECT_EQ(R("[{{ nothing }}]{{ nothing is defined }}{{ nothing|length }}{{ nothing|default('d') }}"), "[]False0d");
  EXPECT_EQ(R("{% if nothing %}x{% else %}y{% endif %}{% for i in nothing %}z{% endfor %}"), "y");
  EXPECT_EQ(R("{{ m.missing is defined }}{{ m['missing'] }}|", {{"m", ojson::object()}}), "False|");
}

TEST(JinjaSpec, StringMethodsAndFilters) {
  EXPECT_EQ(R("{{ ' a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'a,b,c'.split(',') }}|{{ 'a b c'.rsplit(' ', 1) }}"),
            "a b|axx|['a', 'b', 'c']|['a b', 'c']");
  EXPECT_EQ(R("{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}"),
            "TrueTrueABCabc");
  EXPECT_EQ(R("{{ '{}-{}'.format(1, 'b') }} {{ 'a-b'.replace('-', '+') }}"), "1-b a+b");
  EXPECT_EQ(R("{{ [3, 1, 2]|sort|join(',') }} {{ ['a', 'b']|first }}{{ ['a', 'b']|last }} {{ '  t '|trim }}"),
            "1,2,3 ab t");
  EXPECT_EQ(R("{{ x|tojson }}", {{"x", ojson::parse(R"({"b": "é\n", "a": [1, 2.5, null, true]})")}}),
            "{\"b\": \"é\\n\", \"a\": [1, 2.5, null, true]}");
  EXPECT_EQ(R("{{ x|tojson(indent=2) }}", {{"x", ojson::parse(R"({"a": [1], "b": {}})")}}),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(R("{{ xs|selectattr('ok')|map(attribute='n')|list }}",
              {{"xs", ojson::parse(R"([{"n": 1, "ok": true}, {"n": 2, "ok": false}])")}}),
            "[1]");
}

TEST(JinjaSpec, MacrosAndCallBlocks) {
  EXPECT_EQ(R("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}{{ m() }}"), "[1B][12][B]");
  EXPECT_EQ(R("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"), "<in>");
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("ok\n{% if x %}\nno end").find("line 2"), std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("a\nb\n{{ 1 + }}").find("line 3"), std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("{{ 'open").find("unterminated"), std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("{% endfor %}").find("endfor"), std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("{% frobnicate %}").find("unknown tag 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("{% break %}").find("outside of a for loop"), std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("{# never closed").find("comment"), std::string::npos);
}

TEST(JinjaErrors, UnsupportedConstructsNameTheLine) {
  std::string e = ErrorOf<vtllm::jinja::TemplateUnsupportedError>("x\n\n{% include 'a.jinja' %}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("include"), std::string::npos) << e;
  e = ErrorOf<vtllm::jinja::TemplateUnsupportedError>("{% for x in y recursive %}{% endfor %}");
  EXPECT_NE(e.find("recursive"), std::string::npos) << e;
  e = ErrorOf<vtllm::jinja::TemplateUnsupportedError>("\n{{ 'x'|wordwrap(3) }}");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  e = ErrorOf<vtllm::jinja::TemplateUnsupportedError>("{{ 'x'.translate({}) }}");
  EXPECT_NE(e.find("translate"), std::string::npos) << e;
  e = ErrorOf<vtllm::jinja::TemplateUnsupportedError>("{{ 'x'.upper }}");  // Python would print a bound method
  EXPECT_NE(e.find("function"), std::string::npos) << e;
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  std::string e = ErrorOf<vtllm::jinja::TemplateRuntimeError>("\n{{ missing.attr }}");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'missing' is undefined"), std::string::npos) << e;
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateRuntimeError>("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateRuntimeError>("{{ 'a' + 1 }}").find("concatenate"), std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateRuntimeError>("{{ x|nope }}").find("no filter named 'nope'"), std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateRuntimeError>("{% set x = [] %}{{ x.append(1) }}").find("sandbox"),
            std::string::npos);
}

TEST(JinjaErrors, RaiseExceptionMessageIsSurfaced) {
  try {
    R("line one\n{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}");
    FAIL() << "no exception";
  } catch (const vtllm::jinja::TemplateRaisedError& e) {
    EXPECT_EQ(e.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_EQ(e.line(), 2);
    EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos);
  }
}

TEST(JinjaErrors, RunawayTemplatesHitLimits) {
  // Deep nesting in the source.
  const std::string open(5000, '('), close(5000, ')'), minus(5000, '-');
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("{{ " + open + "1" + close + " }}").find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>("{{ " + minus + "1 }}").find("nested too deeply"),
            std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 500; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateSyntaxError>(deep_ifs).find("nested too deeply"), std::string::npos);
  // Unbounded macro recursion.
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateRuntimeError>("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
                .find("nested deeper"),
            std::string::npos);
  // Ranges are capped as in Jinja's sandbox; nested loops are capped by the step budget.
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateRuntimeError>("{{ range(10**7)|length }}").find("range too big"),
            std::string::npos);
  vtllm::jinja::RenderOptions small;
  small.limits.max_steps = 100000;
  try {
    Template("{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}").Render(ojson::object(), small);
    ADD_FAILURE() << "no exception";
  } catch (const vtllm::jinja::TemplateRuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("evaluation steps"), std::string::npos) << e.what();
  }
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateRuntimeError>("{{ 'x' * 10**12 }}").find("exceeds the render limit"),
            std::string::npos);
  EXPECT_NE(ErrorOf<vtllm::jinja::TemplateRuntimeError>("{{ 2 ** 64 }}").find("integer overflow"), std::string::npos);
}

TEST(JinjaErrors, ArbitraryBytesNeverCrash) {
  // A cheap fuzz: every prefix of a real template, and byte-mutated variants, either render or
  // throw a TemplateError.
  const std::string base =
      "{%- set ns = namespace(i=0) %}{% for m in messages[::-1] if m.role != 'x' %}{{ m.content|trim ~ loop.index }}"
      "{% set ns.i = ns.i + 1 %}{% else %}{{ raise_exception('none') }}{% endfor %}{{ ns.i }}{# c #}";
  ojson ctx = {{"messages", ojson::parse(R"([{"role": "user", "content": " hi "}])")}};
  for (size_t n = 0; n <= base.size(); ++n) {
    try {
      R(base.substr(0, n), ctx);
    } catch (const vtllm::jinja::TemplateError&) {
    }
  }
  uint32_t state = 12345;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = base;
    for (int k = 0; k < 3; ++k) {
      state = state * 1664525u + 1013904223u;
      s[state % s.size()] = static_cast<char>((state >> 8) & 0xFF);
    }
    try {
      R(s, ctx);
    } catch (const vtllm::jinja::TemplateError&) {
    }
  }
  SUCCEED();
}

}  // namespace
