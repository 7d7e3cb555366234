package dev.cmf4j.hub;

import java.util.regex.Pattern;

/**
 * A model on the Hugging Face Hub as the user writes it: {@code hf://ORG/REPO[@REV]} (REV a branch, a
 * tag or a commit; {@code main} when absent). Names follow the Hub's rules (letters, digits, {@code -_.},
 * no {@code --} or {@code ..}), so a repository id is always safe as part of a cache folder name.
 */
public record HubUri(String repo, String revision) {
    public static final String SCHEME = "hf://";
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9][A-Za-z0-9_.\\-]{0,95}");
    private static final Pattern COMMIT = Pattern.compile("[0-9a-f]{40}");

    public HubUri {
        String[] parts = repo.split("/", -1);
        if (parts.length > 2) throw bad(repo, "a repository id is ORG/REPO");
        for (String p : parts)
            if (!NAME.matcher(p).matches() || p.contains("--") || p.contains("..") || p.endsWith(".") || p.endsWith("-"))
                throw bad(repo, "\"" + p + "\" is not a valid Hub name (letters, digits, - _ . ; no -- or ..)");
        if (revision.isEmpty() || revision.chars().anyMatch(c -> c <= ' ' || c == '\\') || revision.contains("..")
                || revision.startsWith("/") || revision.endsWith("/") || revision.contains("//"))
            throw bad(repo + "@" + revision, "\"" + revision + "\" is not a valid revision");
    }

    /** Parses {@code hf://ORG/REPO[@REV]}. */
    public static HubUri parse(String s) {
        if (!isHubUri(s)) throw new HubException("\"" + s + "\" is not a Hub model: expected hf://ORG/REPO[@REVISION]");
        String rest = s.substring(SCHEME.length());
        int at = rest.indexOf('@');
        return at < 0 ? new HubUri(rest, "main") : new HubUri(rest.substring(0, at), rest.substring(at + 1));
    }

    public static boolean isHubUri(String s) { return s != null && s.startsWith(SCHEME); }

    /** True when the revision is already a full commit hash (no lookup needed). */
    public boolean pinned() { return COMMIT.matcher(revision).matches(); }

    /** The same repository at {@code rev}. */
    public HubUri at(String rev) { return new HubUri(repo, rev); }

    /** The cache folder name, as huggingface_hub spells it: {@code models--ORG--REPO}. */
    public String cacheFolder() { return "models--" + repo.replace("/", "--"); }

    @Override public String toString() { return SCHEME + repo + ("main".equals(revision) ? "" : "@" + revision); }

    private static HubException bad(String s, String why) {
        return new HubException("hf://" + s + ": " + why);
    }
}
