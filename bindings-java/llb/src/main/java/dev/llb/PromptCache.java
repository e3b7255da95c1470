package dev.llb;

import java.nio.file.Path;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The prompt cache of an engine or pool ({@code prompt_cache}, docs/design.md, "The prompt
 * cache"): conversations that leave the context are kept as llama.cpp sequence states, in RAM and,
 * with a {@link #dir}, in a directory shared across restarts and processes; a later request whose
 * prompt begins with one gets it back instead of reading it again
 * ({@code usage.prompt_tokens_details.cached_tokens}, {@code timings.cache_restored_n}). Set with
 * {@link ChatConfig#withPromptCache}; unset ({@code null}) values take llb's defaults, and llb
 * checks the values when the engine or pool opens.
 *
 * <pre>{@code
 * ChatConfig.of(gguf).withPromptCache(PromptCache.onDisk(Path.of("/var/cache/llb")).withDiskBytes(4L << 30))
 * }</pre>
 *
 * @param ramBytes bytes of states kept in memory ({@code ram_bytes}; llb's default: 4 contexts'
 *     KV cache, at most a quarter of the machine's memory and 8 GiB; 0 turns the RAM tier off)
 * @param dir the directory of the disk tier ({@code dir}; llb's default: none, no disk tier)
 * @param diskBytes bytes of prompt-cache files {@code dir} may hold ({@code disk_bytes}; llb's
 *     default 16 GiB; only with a {@code dir}, llb refuses it otherwise)
 */
public record PromptCache(Long ramBytes, Path dir, Long diskBytes) {

    /** llb's defaults: the RAM tier sized from the model, no disk tier. */
    public static final PromptCache DEFAULT = new PromptCache(null, null, null);

    /** No RAM tier ({@code ram_bytes} 0) and no disk tier: nothing is kept. */
    public static final PromptCache OFF = new PromptCache(0L, null, null);

    /**
     * The default RAM tier and a disk tier in {@code dir}.
     *
     * @param dir the directory (created if missing); several engines, pools and processes may share it
     * @return the settings
     */
    public static PromptCache onDisk(Path dir) {
        return DEFAULT.withDir(dir);
    }

    /**
     * Sets {@code ram_bytes}.
     *
     * @param bytes the RAM tier's budget (0: no RAM tier)
     * @return a copy with it set
     */
    public PromptCache withRamBytes(long bytes) {
        return new PromptCache(bytes, dir, diskBytes);
    }

    /**
     * Sets {@code dir}.
     *
     * @param directory the disk tier's directory
     * @return a copy with it set
     */
    public PromptCache withDir(Path directory) {
        return new PromptCache(ramBytes, directory, diskBytes);
    }

    /**
     * Sets {@code disk_bytes}.
     *
     * @param bytes the disk tier's budget (every prompt-cache file in {@code dir} counts, whoever wrote it)
     * @return a copy with it set
     */
    public PromptCache withDiskBytes(long bytes) {
        return new PromptCache(ramBytes, dir, bytes);
    }

    /** The {@code prompt_cache} object of llb's config; unset fields are left out. */
    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        if (ramBytes != null) {
            m.put("ram_bytes", ramBytes);
        }
        if (dir != null) {
            m.put("dir", dir.toString());
        }
        if (diskBytes != null) {
            m.put("disk_bytes", diskBytes);
        }
        return Collections.unmodifiableMap(m);
    }

    /** The settings of a {@code prompt_cache} object (as {@link #toMap} writes it), or null when it is none. */
    static PromptCache fromMap(Object value) {
        if (!(value instanceof Map<?, ?> m)) {
            return null;
        }
        return new PromptCache(m.get("ram_bytes") instanceof Number n ? n.longValue() : null,
                m.get("dir") instanceof String s ? Path.of(s) : null,
                m.get("disk_bytes") instanceof Number n ? n.longValue() : null);
    }
}
