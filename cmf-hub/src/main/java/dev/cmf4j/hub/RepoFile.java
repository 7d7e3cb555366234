package dev.cmf4j.hub;

import java.util.regex.Pattern;

/**
 * One file of a repository at a commit, as the Hub's tree lists it: its path, size, git blob id and, for a
 * file stored through LFS, the sha256 of its content. The blob name in the cache (its "etag") is the sha256
 * for LFS files and the git blob id otherwise, as in huggingface_hub.
 */
public record RepoFile(String path, long size, String gitOid, String sha256) {
    private static final Pattern SHA1 = Pattern.compile("[0-9a-f]{40}");
    private static final Pattern SHA256 = Pattern.compile("[0-9a-f]{64}");

    public RepoFile {
        // paths become paths in the snapshot folder: nothing may climb out of it
        if (path.isEmpty() || path.startsWith("/") || path.contains("\\") || path.contains("\0")
                || ("/" + path + "/").contains("/../") || ("/" + path + "/").contains("/./") || path.contains("//"))
            throw new HubException("the Hub listed a file with an unsafe path: \"" + path + "\"");
        if (size < 0) throw new HubException(path + ": negative size " + size + " in the Hub's file list");
        if (!SHA1.matcher(gitOid).matches()) throw new HubException(path + ": git blob id \"" + gitOid + "\" is not 40 hex digits");
        if (sha256 != null && !SHA256.matcher(sha256).matches())
            throw new HubException(path + ": LFS sha256 \"" + sha256 + "\" is not 64 hex digits");
    }

    public boolean lfs() { return sha256 != null; }

    /** The blob's name in the cache's {@code blobs/} folder. */
    public String etag() { return lfs() ? sha256 : gitOid; }

    /** The last path element. */
    public String name() { return path.substring(path.lastIndexOf('/') + 1); }
}
