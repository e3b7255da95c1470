# Generates the models the smoke tests use, with the llb CLI (real tokenizer + template).
file(MAKE_DIRECTORY "${OUT}")
foreach(spec "tools;--template;Qwen-Qwen2.5-7B-Instruct" "plain;--template;google-gemma-2-2b-it")
  list(GET spec 0 name)
  list(SUBLIST spec 1 -1 tmpl)
  execute_process(COMMAND "${LLB_CLI}" fixture --vocab qwen2 ${tmpl} --out "${OUT}/${name}.gguf"
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "llb fixture ${name} failed (${rc})")
  endif()
endforeach()
