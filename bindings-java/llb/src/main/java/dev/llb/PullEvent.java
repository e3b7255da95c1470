package dev.llb;

import java.util.List;

/** What a {@link PullListener} hears: llb's {@code pull_resolved}, {@code pull_progress} and {@code pull_warning} events. */
public sealed interface PullEvent {
    /**
     * The event as llb sent it.
     *
     * @return the event JSON
     */
    String json();

    /**
     * The files are chosen, before any download ({@code pull_resolved}).
     *
     * @param repo {@code org/name}
     * @param revision the revision asked for
     * @param commit the commit it resolved to (40 hex)
     * @param files the chosen files (several for a split model)
     * @param total bytes of all chosen files
     * @param toDownload bytes not yet in the cache
     * @param json the event JSON
     */
    record Resolved(String repo, String revision, String commit, List<ResolvedFile> files, long total, long toDownload,
            String json) implements PullEvent {
        /** Copies {@code files}. */
        public Resolved {
            files = List.copyOf(files);
        }
    }

    /**
     * One file of a {@link Resolved} event.
     *
     * @param name the path in the repo
     * @param size bytes
     * @param sha256 its sha256, or null for a small file stored in git (checked by its git blob id)
     * @param cached whether the cache holds it already
     */
    record ResolvedFile(String name, long size, String sha256, boolean cached) {}

    /**
     * Download progress ({@code pull_progress}): at the start and end of each file, and at most
     * every 100 ms between.
     *
     * @param file the file being downloaded
     * @param bytes bytes of all files so far
     * @param total bytes of all files
     * @param fileBytes bytes of this file so far
     * @param fileTotal bytes of this file
     * @param json the event JSON
     */
    record Progress(String file, long bytes, long total, long fileBytes, long fileTotal, String json) implements PullEvent {}

    /**
     * Something the caller may want to know ({@code pull_warning}): {@code template_without_tools},
     * {@code quant_ignored}, {@code ambiguous_quant}, {@code rate_limited}, {@code resume_restarted},
     * {@code waiting_for_lock}, {@code offline_fallback}.
     *
     * @param code the warning's code
     * @param message what happened
     * @param json the event JSON
     */
    record Warning(String code, String message, String json) implements PullEvent {}
}
