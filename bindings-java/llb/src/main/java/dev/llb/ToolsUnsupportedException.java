package dev.llb;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * llb refused to open a model whose chat template cannot describe tools and render tool calls.
 * {@link #getMessage()} is llb's message ({@code "Model X rejected: ..."}), and {@link #caps()}
 * the template capabilities that llama.cpp's probe found.
 */
public final class ToolsUnsupportedException extends LlbException {
    private static final long serialVersionUID = 1L;

    static final String CODE = "tools_unsupported";

    private final transient Map<String, Boolean> caps;
    private final transient List<Path> quarantined;

    ToolsUnsupportedException(String message, Map<String, Boolean> caps, List<Path> quarantined, String json) {
        super(CODE, message, json);
        this.caps = Map.copyOf(caps);
        this.quarantined = List.copyOf(quarantined);
    }

    /**
     * llama.cpp's caps map of the refused model.
     *
     * @return e.g. {@code supports_tools=false, supports_tool_calls=false, ...}
     */
    public Map<String, Boolean> caps() {
        return caps;
    }

    /**
     * Where a refused pull moved the downloaded files ({@link Llb#pull}): a later pull re-checks
     * them there without downloading.
     *
     * @return the quarantined files, empty when the refusal came from opening a model
     */
    public List<Path> quarantined() {
        return quarantined;
    }
}
