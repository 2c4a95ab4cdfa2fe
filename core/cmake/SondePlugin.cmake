# sonde_add_plugin(NAME KIND SOURCES...)
# Builds lib/sonde/<KIND>/<NAME>.so: links core, hidden visibility, no undefined symbols, and
# $ORIGIN-relative rpaths so that a build tree and an install tree behave alike.
function(sonde_add_plugin name kind)
  set(target sonde_${kind}_${name})
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE sonde::core)
  set_target_properties(${target} PROPERTIES
    PREFIX "" OUTPUT_NAME ${name}
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/${SONDE_PLUGIN_ROOT}/${kind}
    BUILD_RPATH "$ORIGIN/../.." INSTALL_RPATH "$ORIGIN/../..")
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  install(TARGETS ${target} LIBRARY DESTINATION ${SONDE_PLUGIN_ROOT}/${kind})
  set(SONDE_LAST_PLUGIN_TARGET ${target} PARENT_SCOPE)
  set_property(GLOBAL APPEND PROPERTY SONDE_PLUGIN_TARGETS ${target})  # the `runtime` target's
endfunction()
