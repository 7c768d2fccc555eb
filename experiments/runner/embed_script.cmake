# Writes OUT, a C++ file defining attnlab::report::kReportScript as the text of IN (report.js), so that
# every report inlines the script without reading any file at run time. cmake -DIN=... -DOUT=... -P this.
file(READ "${IN}" text)
string(FIND "${text}" ")attnlab_js" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains ')attnlab_js', which ends the raw string it is embedded in")
endif()
file(WRITE "${OUT}" "// Generated from experiments/runner/report.js by experiments/runner/embed_script.cmake: edit that file.\n"
  "#include \"experiments/runner/report_svg.hpp\"\n\nnamespace attnlab::report {\n"
  "const char* const kReportScript = R\"attnlab_js(${text})attnlab_js\";\n}  // namespace attnlab::report\n")
