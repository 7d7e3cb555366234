package dev.cmf4j.hub;

import java.util.List;
import java.util.Optional;

/** A repository at one commit: the commit its revision resolved to, and every file it holds there. */
public record RepoRevision(HubUri uri, String commit, List<RepoFile> files) {
    public RepoRevision { files = List.copyOf(files); }

    public Optional<RepoFile> file(String path) {
        return files.stream().filter(f -> f.path().equals(path)).findFirst();
    }

    /** The repository pinned at its commit ({@code hf://ORG/REPO@COMMIT}). */
    public HubUri pinned() { return uri.at(commit); }
}
