# One warning policy for every target of ours: strict, and fatal unless AIRLOCK_WERROR is off.
function(airlock_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
    -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough -Wformat=2 -Wno-missing-field-initializers
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
  if(AIRLOCK_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
