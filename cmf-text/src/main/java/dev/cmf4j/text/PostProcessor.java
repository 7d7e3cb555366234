package dev.cmf4j.text;

import java.util.List;

/**
 * Post-processors of tokenizer.json, for a single sequence: they add special tokens around it
 * (only when {@code addSpecialTokens}) and may trim offsets.
 */
sealed interface PostProcessor {
    void process(EncodingBuilder e, boolean addSpecialTokens);

    /** One piece of a template: a special token's ids/tokens, or the sequence itself. */
    record Piece(boolean isSequence, String sequenceId, int[] ids, List<String> tokens) {}

    /** {@code "single": [{"SpecialToken": {...}}, {"Sequence": {"id": "A"}}, ...]}. */
    record Template(List<Piece> single) implements PostProcessor {
        @Override public void process(EncodingBuilder e, boolean addSpecialTokens) {
            if (!addSpecialTokens) return;
            int at = 0;
            boolean seenSequence = false;
            for (Piece p : single) {
                if (p.isSequence()) {
                    at = e.size();
                    seenSequence = true;
                    continue;
                }
                for (int k = 0; k < p.ids().length; k++) {
                    if (seenSequence) e.add(p.ids()[k], p.tokens().get(k), 0, 0);
                    else e.insert(at++, p.ids()[k], p.tokens().get(k), 0, 0);
                }
            }
        }
    }

    /** Byte-level: adds nothing; optionally trims leading/trailing spaces out of the offsets. */
    record ByteLevel(boolean addPrefixSpace, boolean trimOffsets) implements PostProcessor {
        @Override public void process(EncodingBuilder e, boolean addSpecialTokens) {
            if (trimOffsets) trim(e, addPrefixSpace);
        }

        static void trim(EncodingBuilder e, boolean addPrefixSpace) {
            for (int i = 0; i < e.size(); i++) {
                String tok = e.tokens.get(i);
                int[] cps = tok.codePoints().toArray();
                int lead = 0;
                while (lead < cps.length && isSpace(cps[lead])) lead++;
                int trail = 0;
                while (trail < cps.length && isSpace(cps[cps.length - 1 - trail])) trail++;
                if (lead == 0 && trail == 0) continue;
                int s = e.starts.a[i], en = e.ends.a[i];
                if (lead > 0) {
                    boolean isFirst = i == 0 || s == 0;
                    if (isFirst && addPrefixSpace && lead == 1) lead = 0;
                    s = Math.min(s + lead, en);
                }
                if (trail > 0 && en >= trail) en = Math.max(en - trail, s);
                e.starts.a[i] = s;
                e.ends.a[i] = en;
            }
        }

        private static boolean isSpace(int c) {
            return c == 'Ġ' || UnicodeProps.isWhitespace(c);
        }
    }

    /** BERT: {@code [CLS] A [SEP]}. */
    record Bert(String sep, int sepId, String cls, int clsId) implements PostProcessor {
        @Override public void process(EncodingBuilder e, boolean addSpecialTokens) {
            if (!addSpecialTokens) return;
            e.insert(0, clsId, cls, 0, 0);
            e.add(sepId, sep, 0, 0);
        }
    }

    /** RoBERTa: optional offset trimming, then {@code <s> A </s>}. */
    record Roberta(String sep, int sepId, String cls, int clsId, boolean trimOffsets, boolean addPrefixSpace) implements PostProcessor {
        @Override public void process(EncodingBuilder e, boolean addSpecialTokens) {
            if (trimOffsets) ByteLevel.trim(e, addPrefixSpace);
            if (!addSpecialTokens) return;
            e.insert(0, clsId, cls, 0, 0);
            e.add(sepId, sep, 0, 0);
        }
    }

    record Sequence(List<PostProcessor> processors) implements PostProcessor {
        @Override public void process(EncodingBuilder e, boolean addSpecialTokens) {
            for (PostProcessor p : processors) p.process(e, addSpecialTokens);
        }
    }
}
