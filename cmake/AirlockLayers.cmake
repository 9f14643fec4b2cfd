# The rooms of docs/architecture.md, enforced by the compiler.
#
# Internal headers are included by their path below src/ ("backends/linux/launcher.hpp"). Rather
# than putting all of src/ on a component's include path, each component gets a view: a directory
# in the build tree holding links to exactly the rooms it may use. An include of any other room
# names a file that does not exist on its path, and the build stops there.
#
#   airlock_rooms(<target> [PUBLIC] ROOMS <room>...)
#
# <room> is a folder below src/ ("core", "backends/kit", "base"). PUBLIC hands the same view to
# whatever links the target (a library whose headers its users include, like base). The public
# headers (include/airlock) come with the libraries a target links, not from here.
function(airlock_rooms target)
  cmake_parse_arguments(ARG "PUBLIC" "" "ROOMS" ${ARGN})
  set(view ${PROJECT_BINARY_DIR}/rooms/${target})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  foreach(room IN LISTS ARG_ROOMS)
    if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/src/${room})
      message(FATAL_ERROR "airlock_rooms(${target}): src/${room} is not a room")
    endif()
    get_filename_component(parent ${view}/${room} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${room} ${view}/${room} SYMBOLIC)
  endforeach()
  if(ARG_PUBLIC)
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${view}>)
  else()
    target_include_directories(${target} PRIVATE ${view})
  endif()
  set_property(TARGET ${target} PROPERTY AIRLOCK_ROOM_VIEW ${view})
endfunction()
