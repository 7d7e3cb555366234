package dev.cmf4j.chat.jinja;

/** One lexer token. {@code value} is the decoded literal for strings and numbers, else the text. */
record Token(Type type, String text, Object value, int line) {

    enum Type { DATA, VARIABLE_BEGIN, VARIABLE_END, BLOCK_BEGIN, BLOCK_END, NAME, STRING, INTEGER, FLOAT, OPERATOR, EOF }

    boolean is(Type t) {
        return type == t;
    }

    /** An operator token with this exact text. */
    boolean isOp(String op) {
        return type == Type.OPERATOR && text.equals(op);
    }

    /** A name token with this exact text (jinja's {@code "name:if"} test). */
    boolean isName(String name) {
        return type == Type.NAME && text.equals(name);
    }

    /** How jinja2 names the token in error messages. */
    String describe() {
        return switch (type) {
            case EOF -> "end of template";
            case VARIABLE_END -> "end of print statement";
            case BLOCK_END -> "end of statement block";
            case DATA -> "template data";
            default -> text;
        };
    }
}
