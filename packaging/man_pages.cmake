# Man pages from a built program's own --help (help2man, Debian package help2man), gzipped as
# Debian installs them. Run after the program is linked:
#   cmake -DHELP2MAN=... -DPROGRAM=... -DPAGE=rankmap -DSECTION=1 -DOUT=<dir> [-DSUBCOMMANDS=ON]
#         -P man_pages.cmake
# writes <dir>/man<SECTION>/<PAGE>.<SECTION>.gz and, with SUBCOMMANDS, one page per subcommand
# that the program's --help lists, git's way (`man rankmap-plan`), each taking its description
# from that list. The pages follow the help text, so nothing here repeats an option.
cmake_minimum_required(VERSION 3.25)
foreach(var HELP2MAN PROGRAM PAGE SECTION OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "man_pages.cmake: -D${var}=... is required")
  endif()
endforeach()
set(dir ${OUT}/man${SECTION})
file(REMOVE_RECURSE ${dir})
file(MAKE_DIRECTORY ${dir} ${OUT}/wrappers)

execute_process(COMMAND ${PROGRAM} --help OUTPUT_VARIABLE help RESULT_VARIABLE rc TIMEOUT 30)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "man_pages.cmake: ${PROGRAM} --help exited ${rc}")
endif()
# The first line is "<program>: <what it does>".
string(REGEX MATCH "^[^\n]*" first "${help}")
string(REGEX REPLACE "^[^:]*: *" "" description "${first}")

# One page: help2man runs `<program> --help` and `--version`; the page is named after the
# program's file name, so a subcommand is run through a wrapper named rankmap-<sub>.
function(make_page program name what seeAlso)
  set(include ${OUT}/wrappers/${name}.h2m)
  file(WRITE ${include} "[see also]\n${seeAlso}\n")
  execute_process(
    COMMAND ${HELP2MAN} --no-info --no-discard-stderr --section=${SECTION} --name=${what}
            --include=${include} --output=${dir}/${name}.${SECTION} ${program}
    RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "man_pages.cmake: help2man for ${name} exited ${rc}: ${err}")
  endif()
  execute_process(COMMAND gzip -9nf ${dir}/${name}.${SECTION} RESULT_VARIABLE rc TIMEOUT 30)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "man_pages.cmake: gzip of ${name}.${SECTION} exited ${rc}")
  endif()
endfunction()

set(subPages "")
if(SUBCOMMANDS)
  # The "Subcommands:" block of --help: "  <name>   <description>" per line.
  string(REGEX REPLACE ".*\nSubcommands:\n" "" block "${help}")
  string(REPLACE "\n" ";" lines "${block}")
  set(subs "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^  ([a-z][a-z-]*) +(.*)$")
      set(sub ${CMAKE_MATCH_1})
      set(what_${sub} "${CMAKE_MATCH_2}")
      list(APPEND subs ${sub})
    endif()
  endforeach()
  if(NOT subs)
    message(FATAL_ERROR "man_pages.cmake: no subcommands in ${PROGRAM} --help")
  endif()
  foreach(sub IN LISTS subs)
    list(APPEND subPages "${PAGE}-${sub}(${SECTION})")
  endforeach()
  list(JOIN subPages ", " seeAlsoSubs)
  foreach(sub IN LISTS subs)
    set(wrapper ${OUT}/wrappers/${PAGE}-${sub})
    file(WRITE ${wrapper} "#!/bin/sh\nexec '${PROGRAM}' ${sub} \"$@\"\n")
    file(CHMOD ${wrapper} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
    # CLI11's descriptions start with a capital and end without a full stop; man's NAME line
    # is lower case.
    string(SUBSTRING "${what_${sub}}" 0 1 head)
    string(SUBSTRING "${what_${sub}}" 1 -1 tail)
    string(TOLOWER "${head}" head)
    make_page(${wrapper} ${PAGE}-${sub} "${head}${tail}" "${PAGE}(${SECTION}), ${seeAlsoSubs}")
  endforeach()
endif()
list(JOIN subPages ", " seeAlso)
if(NOT seeAlso)
  set(seeAlso "rankmap(1); /usr/share/doc/rankmap")
endif()
make_page(${PROGRAM} ${PAGE} "${description}" "${seeAlso}")
