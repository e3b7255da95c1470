package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;

/**
 * The loaded library's version, from {@link Llb#version()}.
 *
 * @param llb llb's version, e.g. {@code "0.1.0"}
 * @param abi the C ABI version this library implements
 * @param llamaCppCommit the llama.cpp commit it was built with
 * @param chatStack the llama.cpp release whose chat stack it carries, e.g. {@code "b9371"}
 * @param llamaCppSource where that llama.cpp tree came from
 * @param platform the jar's platform folder the library was loaded from ({@code linux-x86_64},
 *     {@code linux-aarch64}, {@code linux-x86_64-cuda}), or the library's own platform when it was
 *     loaded from a path ({@code -Dllb.library.path}, {@code java.library.path})
 * @param librarySource where the library was loaded from
 * @param cpuVariant the CPU kernels in use: the module ggml chose for this CPU at run time in a
 *     release build ({@code haswell}, {@code skylakex}, {@code sse42}, ... on x86-64;
 *     {@code armv8.2_1}, ... on aarch64), or {@code built-in} for a library built for one CPU level
 * @param backends ggml's backends in this process ({@code CPU}; {@code CUDA}, {@code RPC}, ...)
 * @param loaderNote why a CUDA library on the class path was not used, or gave no GPU (null when
 *     neither)
 * @param json the {@code version} JSON as llb returned it
 */
public record VersionInfo(String llb, int abi, String llamaCppCommit, String chatStack, String llamaCppSource,
        String platform, String librarySource, String cpuVariant, List<String> backends, String loaderNote,
        String json) {

    static VersionInfo parse(String json) {
        return parse(json, LibraryLoader.loaded());
    }

    static VersionInfo parse(String json, LibraryLoader.Loaded loaded) {
        JsonNode n = Json.parse(json);
        JsonNode cpp = n.path("llama_cpp");
        List<String> backends = new ArrayList<>();
        n.path("backends").forEach(b -> backends.add(b.asText()));
        String platform = loaded.platform() != null ? loaded.platform() : Json.text(n, "platform");
        return new VersionInfo(Json.text(n, "llb"), n.path("abi").asInt(-1), Json.text(cpp, "commit"),
                Json.text(cpp, "chat_stack"), Json.text(cpp, "source"), platform, loaded.source(),
                Json.text(n.path("cpu"), "variant"), List.copyOf(backends), loaded.note(), json);
    }
}
