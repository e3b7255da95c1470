package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The loaded library's version, from {@link Llb#version()}.
 *
 * @param llb llb's version, e.g. {@code "0.1.0"}
 * @param abi the C ABI version this library implements
 * @param llamaCppCommit the llama.cpp commit it was built with
 * @param chatStack the llama.cpp release whose chat stack it carries, e.g. {@code "b9371"}
 * @param llamaCppSource where that llama.cpp tree came from
 * @param json the {@code version} JSON as llb returned it
 */
public record VersionInfo(String llb, int abi, String llamaCppCommit, String chatStack, String llamaCppSource,
        String json) {

    static VersionInfo parse(String json) {
        JsonNode n = Json.parse(json);
        JsonNode cpp = n.path("llama_cpp");
        return new VersionInfo(Json.text(n, "llb"), n.path("abi").asInt(-1), Json.text(cpp, "commit"),
                Json.text(cpp, "chat_stack"), Json.text(cpp, "source"), json);
    }
}
