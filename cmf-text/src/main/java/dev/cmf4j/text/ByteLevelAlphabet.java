package dev.cmf4j.text;

/**
 * GPT-2's reversible byte-to-character map: printable bytes map to themselves, the other 68 bytes to
 * U+0100.. in order, so every byte string has a printable, whitespace-free spelling ("Ġ" is the space).
 */
final class ByteLevelAlphabet {
    private ByteLevelAlphabet() {}

    /** Character for each byte value. */
    static final char[] BYTE_TO_CHAR = new char[256];
    /** Byte for each character below U+0144, or -1 when the character is not in the alphabet. */
    private static final short[] CHAR_TO_BYTE = new short[0x144];

    static {
        java.util.Arrays.fill(CHAR_TO_BYTE, (short) -1);
        int n = 0;
        for (int b = 0; b < 256; b++) {
            boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            char c = printable ? (char) b : (char) (256 + n++);
            BYTE_TO_CHAR[b] = c;
            CHAR_TO_BYTE[c] = (short) b;
        }
    }

    /** The byte that {@code c} spells, or -1 when {@code c} is outside the alphabet. */
    static int byteOf(int c) {
        return c < CHAR_TO_BYTE.length ? CHAR_TO_BYTE[c] : -1;
    }
}
