# The libraries of the tools and benchmarks (fa-demo, fa-bench, fa-cpu-bench, fa-onnx-fuse),
# never of the library itself: CLI11 (command lines), {fmt} (formatting, tables) and nlohmann-json
# (records).
# Debian's packages (libcli11-dev, libfmt-dev, nlohmann-json3-dev; scripts/setup.sh installs them)
# are found through their CMake packages. A machine without them (the GPU machine) can carry
# copies of the headers in .deps/ (git-ignored), or name them with FA_*_INCLUDE_DIR:
#   .deps/CLI11/CLI/CLI.hpp   .deps/fmt/fmt/format.h   .deps/nlohmann_json/nlohmann/json.hpp
# ({fmt} is then used header-only). The result is the interface target fa_tool_deps (with
# tools/common/ on its include path); without one of the three it is not defined, and the tools
# are skipped with a warning.
set(FA_CLI11_INCLUDE_DIR "" CACHE PATH "Directory containing CLI/CLI.hpp (CLI11 headers)")
set(FA_FMT_INCLUDE_DIR "" CACHE PATH "Directory containing fmt/format.h ({fmt} headers, used header-only)")
set(FA_JSON_INCLUDE_DIR "" CACHE PATH "Directory containing nlohmann/json.hpp (nlohmann-json headers)")

set(fa_tool_links "")
set(fa_tool_includes "")
set(fa_tool_missing "")

find_package(CLI11 CONFIG QUIET)
if(TARGET CLI11::CLI11)
  list(APPEND fa_tool_links CLI11::CLI11)
else()
  find_path(FA_CLI11_HEADERS CLI/CLI.hpp HINTS ${FA_CLI11_INCLUDE_DIR} ${PROJECT_SOURCE_DIR}/.deps/CLI11)
  if(FA_CLI11_HEADERS)
    list(APPEND fa_tool_includes ${FA_CLI11_HEADERS})
  else()
    list(APPEND fa_tool_missing "CLI11 (libcli11-dev)")
  endif()
endif()

find_package(fmt CONFIG QUIET)
if(TARGET fmt::fmt)
  list(APPEND fa_tool_links fmt::fmt)
else()
  find_path(FA_FMT_HEADERS fmt/format.h HINTS ${FA_FMT_INCLUDE_DIR} ${PROJECT_SOURCE_DIR}/.deps/fmt)
  if(FA_FMT_HEADERS)
    list(APPEND fa_tool_includes ${FA_FMT_HEADERS})
    set(fa_tool_header_only_fmt ON)
  else()
    list(APPEND fa_tool_missing "{fmt} (libfmt-dev)")
  endif()
endif()

find_package(nlohmann_json CONFIG QUIET)
if(TARGET nlohmann_json::nlohmann_json)
  list(APPEND fa_tool_links nlohmann_json::nlohmann_json)
else()
  find_path(FA_JSON_HEADERS nlohmann/json.hpp HINTS ${FA_JSON_INCLUDE_DIR} ${PROJECT_SOURCE_DIR}/.deps/nlohmann_json)
  if(FA_JSON_HEADERS)
    list(APPEND fa_tool_includes ${FA_JSON_HEADERS})
  else()
    list(APPEND fa_tool_missing "nlohmann-json (nlohmann-json3-dev)")
  endif()
endif()

if(fa_tool_missing)
  string(REPLACE ";" ", " fa_tool_missing "${fa_tool_missing}")
  message(WARNING "flashattn: ${fa_tool_missing} not found - fa-demo, fa-bench, fa-cpu-bench and fa-onnx-fuse "
                  "are not built (run scripts/setup.sh, or see tools/deps.cmake)")
  return()
endif()

add_library(fa_tool_deps INTERFACE)
target_link_libraries(fa_tool_deps INTERFACE ${fa_tool_links})
target_include_directories(fa_tool_deps INTERFACE ${CMAKE_CURRENT_LIST_DIR}/common ${fa_tool_includes})
if(fa_tool_header_only_fmt)
  target_compile_definitions(fa_tool_deps INTERFACE FMT_HEADER_ONLY=1)
endif()
