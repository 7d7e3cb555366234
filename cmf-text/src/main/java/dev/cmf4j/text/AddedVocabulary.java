package dev.cmf4j.text;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The added tokens and how they are found in text. Ids are assigned as the reference does when it
 * loads a tokenizer.json (the "id" field there is only checked, not used): an added token whose
 * content is already a vocabulary token takes that id, the others are numbered after the vocabulary.
 * Matching is leftmost-longest over all contents, with {@code single_word}, {@code lstrip} and
 * {@code rstrip} applied to each match and a discarded match still consuming its text.
 */
final class AddedVocabulary {
    private final Map<String, Integer> contentToId = new HashMap<>();
    private final Map<Integer, AddedToken> idToToken = new LinkedHashMap<>();
    private final Map<Integer, String> normalizedForm = new HashMap<>();
    private final Set<String> specialContents = new HashSet<>();
    private final Trie rawTrie;
    private final Trie normalizedTrie;

    AddedVocabulary(List<AddedToken> tokens, BpeModel model, TextNormalizer normalizer) {
        int vocabSize = model.vocabSize();
        int nextId = vocabSize;
        for (AddedToken t : tokens) {
            if (t.content().isEmpty()) continue;
            Integer existing = contentToId.get(t.content());
            if (existing != null && t.equals(idToToken.get(existing))) continue;
            int id;
            if (existing != null) id = existing;
            else if (model.tokenToId(t.content()) >= 0) id = model.tokenToId(t.content());
            else id = nextId++;
            if (t.normalized() && normalizer != null) {
                String normed = normalizer.normalize(NormalizedText.of(t.content(), 0)).text;
                if (!normed.equals(t.content())) normalizedForm.put(id, normed);
            }
            contentToId.put(t.content(), id);
            if (t.special()) specialContents.add(t.content());
            idToToken.put(id, t);
        }
        Trie.Builder raw = new Trie.Builder(), norm = new Trie.Builder();
        for (Map.Entry<Integer, AddedToken> e : idToToken.entrySet()) {
            AddedToken t = e.getValue();
            if (t.normalized()) norm.add(normalizedForm.getOrDefault(e.getKey(), t.content()), e.getKey());
            else raw.add(t.content(), e.getKey());
        }
        rawTrie = raw.build();
        normalizedTrie = norm.build();
    }

    int tokenToId(String content) {
        Integer id = contentToId.get(content);
        return id == null ? -1 : id;
    }

    /** The string decoding uses for an added token id (its normalized form when it has one), or null. */
    String idToToken(int id) {
        AddedToken t = idToToken.get(id);
        if (t == null) return null;
        String n = normalizedForm.get(id);
        return n != null ? n : t.content();
    }

    AddedToken token(int id) {
        return idToToken.get(id);
    }

    boolean isSpecialContent(String token) {
        return specialContents.contains(token);
    }

    int maxId() {
        int m = -1;
        for (int id : idToToken.keySet()) m = Math.max(m, id);
        return m;
    }

    Map<Integer, AddedToken> all() {
        return java.util.Collections.unmodifiableMap(idToToken);
    }

    /** A span of the input: an added token ({@code id >= 0}) or text between them ({@code id == -1}). */
    record Span(int start, int end, int id) {}

    List<Span> findRaw(String s) {
        return find(s, rawTrie);
    }

    List<Span> findNormalized(String s) {
        return find(s, normalizedTrie);
    }

    /** The reference's {@code find_matches}: spans covering {@code s}. */
    private List<Span> find(String s, Trie trie) {
        List<Span> out = new ArrayList<>();
        if (s.isEmpty()) { out.add(new Span(0, 0, -1)); return out; }
        if (trie.isEmpty()) { out.add(new Span(0, s.length(), -1)); return out; }
        int startOffset = 0;
        int i = 0, n = s.length();
        while (i < n) {
            long m = trie.longestAt(s, i);
            if (m < 0) { i++; continue; }
            int len = (int) (m >>> 32), id = (int) m;
            int start = i, stop = i + len;
            i = stop; // the automaton resumes after this match whether or not it is kept
            AddedToken t = idToToken.get(id);
            if (t.singleWord()) {
                boolean startSpace = start == 0 || !UnicodeProps.isWord(s.codePointBefore(start));
                boolean stopSpace = stop == n || !UnicodeProps.isWord(s.codePointAt(stop));
                if (!startSpace || !stopSpace) continue;
            }
            if (t.lstrip()) {
                int ns = start;
                while (ns > 0 && UnicodeProps.isWhitespace(s.codePointBefore(ns))) ns -= Character.charCount(s.codePointBefore(ns));
                start = Math.max(ns, startOffset);
            }
            if (t.rstrip()) {
                while (stop < n && UnicodeProps.isWhitespace(s.codePointAt(stop))) stop += Character.charCount(s.codePointAt(stop));
            }
            if (startOffset < start) out.add(new Span(startOffset, start, -1));
            out.add(new Span(start, stop, id));
            startOffset = stop;
        }
        if (startOffset != n) out.add(new Span(startOffset, n, -1));
        return out;
    }

    /** A character trie answering "longest content starting here". */
    static final class Trie {
        private final Node root;
        /** First characters of any content, to reject most positions with one array read. */
        private final boolean[] firstChar;

        private Trie(Node root, boolean[] firstChar) {
            this.root = root;
            this.firstChar = firstChar;
        }

        boolean isEmpty() {
            return root.keys.length == 0;
        }

        /** {@code length << 32 | id} of the longest content starting at {@code i}, or -1. */
        long longestAt(String s, int i) {
            if (!firstChar[s.charAt(i)]) return -1;
            Node node = root;
            long best = -1;
            for (int j = i; j < s.length(); j++) {
                node = node.child(s.charAt(j));
                if (node == null) break;
                if (node.id >= 0) best = ((long) (j + 1 - i) << 32) | node.id;
            }
            return best;
        }

        private static final class Node {
            char[] keys = new char[0];
            Node[] kids = new Node[0];
            int id = -1;

            Node child(char c) {
                int k = Arrays.binarySearch(keys, c);
                return k >= 0 ? kids[k] : null;
            }
        }

        static final class Builder {
            private final Map<String, Integer> entries = new LinkedHashMap<>();

            void add(String content, int id) {
                entries.put(content, id);
            }

            Trie build() {
                Node root = new Node();
                boolean[] first = new boolean[0x10000];
                Map<Node, Map<Character, Node>> pending = new HashMap<>();
                for (Map.Entry<String, Integer> e : entries.entrySet()) {
                    String k = e.getKey();
                    if (k.isEmpty()) continue;
                    first[k.charAt(0)] = true;
                    Node node = root;
                    for (int j = 0; j < k.length(); j++) {
                        node = pending.computeIfAbsent(node, x -> new java.util.TreeMap<>()).computeIfAbsent(k.charAt(j), x -> new Node());
                    }
                    node.id = e.getValue();
                }
                for (Map.Entry<Node, Map<Character, Node>> e : pending.entrySet()) {
                    Map<Character, Node> kids = e.getValue();
                    Node n = e.getKey();
                    n.keys = new char[kids.size()];
                    n.kids = new Node[kids.size()];
                    int j = 0;
                    for (Map.Entry<Character, Node> kv : kids.entrySet()) { n.keys[j] = kv.getKey(); n.kids[j] = kv.getValue(); j++; }
                }
                return new Trie(root, first);
            }
        }
    }
}
