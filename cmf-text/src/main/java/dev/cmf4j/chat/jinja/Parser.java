package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;
import dev.cmf4j.chat.jinja.Token.Type;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Recursive-descent parser following jinja2's {@code parser.py} rule for rule (same precedence,
 * same quirks: unary minus binds tighter than {@code **}, filters bind tighter than arithmetic,
 * {@code **} is left-associative, adjacent string literals concatenate).
 */
final class Parser {

    private final List<Token> tokens;
    private int at;
    /** Enclosing for-loops, for break/continue; reset inside macros. */
    private int loopDepth;
    /** Nesting of blocks and bracketed expressions; bounded so hostile input cannot exhaust the stack. */
    private int nesting;
    static final int MAX_NESTING = 200;

    private Parser(List<Token> tokens) {
        this.tokens = tokens;
    }

    static List<Node> parse(String source) {
        Parser p = new Parser(Lexer.tokenize(source));
        List<Node> body;
        try {
            body = p.subparse(Set.of());
            if (!p.current().is(Type.EOF)) throw p.fail("unexpected '" + p.current().describe() + "'");
            FilterTestCheck.check(body);
        } catch (StackOverflowError e) {
            throw new TemplateException(Kind.LimitExceeded, "template nested too deeply to parse");
        }
        return body;
    }

    // ---- token stream

    private Token current() {
        return tokens.get(at);
    }

    private Token look() {
        return tokens.get(Math.min(at + 1, tokens.size() - 1));
    }

    private Token next() {
        Token t = tokens.get(at);
        if (at < tokens.size() - 1) at++;
        return t;
    }

    private boolean skipOp(String op) {
        if (current().isOp(op)) {
            next();
            return true;
        }
        return false;
    }

    private boolean skipName(String name) {
        if (current().isName(name)) {
            next();
            return true;
        }
        return false;
    }

    private Token expect(Type type, String what) {
        Token t = current();
        if (!t.is(type)) {
            if (t.is(Type.EOF)) throw fail("unexpected end of template, expected '" + what + "'.");
            throw fail("expected token '" + what + "', got '" + t.describe() + "'");
        }
        return next();
    }

    private Token expectOp(String op) {
        if (!current().isOp(op)) {
            if (current().is(Type.EOF)) throw fail("unexpected end of template, expected '" + op + "'.");
            throw fail("expected token '" + op + "', got '" + current().describe() + "'");
        }
        return next();
    }

    private Token expectName(String name) {
        if (!current().isName(name)) throw fail("expected token '" + name + "', got '" + current().describe() + "'");
        return next();
    }

    private TemplateException fail(String msg) {
        return new TemplateException(Kind.TemplateSyntaxError, msg, current().line());
    }

    // ---- statements

    /** Parses nodes until a block tag whose name is in endTags (left as the current token) or EOF. */
    private List<Node> subparse(Set<String> endTags) {
        List<Node> body = new ArrayList<>();
        while (!current().is(Type.EOF)) {
            Token t = current();
            switch (t.type()) {
                case DATA -> {
                    next();
                    body.add(new Node.Data(t.text(), t.line()));
                }
                case VARIABLE_BEGIN -> {
                    next();
                    Expr e = parseTuple(false, true, Set.of(), false);
                    body.add(new Node.Output(e, t.line()));
                    expect(Type.VARIABLE_END, "end of print statement");
                }
                case BLOCK_BEGIN -> {
                    next();
                    if (current().is(Type.NAME) && endTags.contains(current().text())) return body;
                    body.add(parseStatement());
                    expect(Type.BLOCK_END, "end of statement block");
                }
                default -> throw fail("unexpected '" + t.describe() + "'");
            }
        }
        return body;
    }

    /** jinja2's {@code parse_statements}: optional colon, block end, body up to an end tag. */
    private List<Node> parseStatements(Set<String> endTags, boolean dropNeedle) {
        skipOp(":");
        expect(Type.BLOCK_END, "end of statement block");
        enterNesting();
        List<Node> body = subparse(endTags);
        nesting--;
        if (current().is(Type.EOF)) {
            throw fail("Unexpected end of template. Jinja was looking for the following tags: "
                    + String.join(" or ", endTags.stream().sorted().map(s -> "'" + s + "'").toList())
                    + ". The innermost block that needs to be closed is '" + innermost(endTags) + "'.");
        }
        if (dropNeedle) next();
        return body;
    }

    private static String innermost(Set<String> endTags) {
        for (String s : endTags) if (s.startsWith("end")) return s.substring(3);
        return endTags.iterator().next();
    }

    private Node parseStatement() {
        Token t = current();
        if (!t.is(Type.NAME)) throw fail("tag name expected");
        return switch (t.text()) {
            case "for" -> parseFor();
            case "if" -> parseIf();
            case "set" -> parseSet();
            case "macro" -> parseMacro();
            case "call" -> parseCallBlock();
            case "filter" -> parseFilterBlock();
            case "with" -> parseWith();
            case "block" -> parseBlock();
            case "generation" -> {
                next();
                yield new Node.Generation(parseStatements(Set.of("endgeneration"), true), t.line());
            }
            case "break", "continue" -> {
                next();
                if (loopDepth == 0) throw fail("'" + t.text() + "' outside of a for loop");
                yield t.text().equals("break") ? new Node.Break(t.line()) : new Node.Continue(t.line());
            }
            case "include", "import", "from", "extends" -> throw new TemplateException(Kind.Unsupported,
                    "{% " + t.text() + " %} needs a template loader; chat templates are rendered standalone", t.line());
            case "autoescape" -> throw new TemplateException(Kind.Unsupported,
                    "{% autoescape %} is not supported (transformers renders with autoescape off)", t.line());
            default -> throw fail("Encountered unknown tag '" + t.text() + "'.");
        };
    }

    private Node parseFor() {
        int line = next().line();
        Expr target = parseAssignTarget(true, Set.of("in"));
        expectName("in");
        Expr iter = parseTuple(false, false, Set.of("recursive"), false);
        Expr filter = null;
        if (skipName("if")) filter = parseExpression(true);
        boolean recursive = skipName("recursive");
        loopDepth++;
        List<Node> body = parseStatements(Set.of("endfor", "else"), false);
        loopDepth--;
        List<Node> otherwise = List.of();
        if (next().text().equals("else")) otherwise = parseStatements(Set.of("endfor"), true);
        return new Node.For(target, iter, filter, recursive, body, otherwise, line);
    }

    private Node parseIf() {
        int line = next().line();
        List<Node.IfBranch> branches = new ArrayList<>();
        List<Node> otherwise = List.of();
        while (true) {
            Expr test = parseTuple(false, false, Set.of(), false);
            List<Node> body = parseStatements(Set.of("elif", "else", "endif"), false);
            branches.add(new Node.IfBranch(test, body));
            Token t = next();
            if (t.isName("elif")) continue;
            if (t.isName("else")) otherwise = parseStatements(Set.of("endif"), true);
            break;
        }
        return new Node.If(branches, otherwise, line);
    }

    private Node parseSet() {
        int line = next().line();
        Expr target;
        if (current().is(Type.NAME) && look().isOp(".")) {
            Token ns = next();
            next();
            Token attr = expect(Type.NAME, "name");
            target = new Expr.NsRef(ns.text(), attr.text(), ns.line());
        } else {
            target = parseAssignTarget(true, Set.of());
        }
        if (skipOp("=")) return new Node.Set(target, parseTuple(false, true, Set.of(), false), line);
        Expr filter = current().isOp("|") ? parseFilter(null, false) : null;
        List<Node> body = parseStatements(Set.of("endset"), true);
        return new Node.SetBlock(target, filter, body, line);
    }

    private Node.Macro parseMacro() {
        int line = next().line();
        Token name = expect(Type.NAME, "name");
        List<Node.Param> params = parseSignature();
        int savedLoops = loopDepth;
        loopDepth = 0;
        List<Node> body = parseStatements(Set.of("endmacro"), true);
        loopDepth = savedLoops;
        return macro(name.text(), params, body, line);
    }

    private static Node.Macro macro(String name, List<Node.Param> params, List<Node> body, int line) {
        Names used = new Names();
        used.scanNodes(body);
        return new Node.Macro(name, params, body, used.has("caller"), used.has("varargs"), used.has("kwargs"), line);
    }

    private List<Node.Param> parseSignature() {
        List<Node.Param> params = new ArrayList<>();
        expectOp("(");
        boolean sawDefault = false;
        while (!current().isOp(")")) {
            if (!params.isEmpty()) expectOp(",");
            Token n = expect(Type.NAME, "name");
            Expr def = null;
            if (skipOp("=")) {
                def = parseExpression(true);
                sawDefault = true;
            } else if (sawDefault) {
                throw fail("non-default argument follows default argument");
            }
            params.add(new Node.Param(n.text(), def));
        }
        expectOp(")");
        return params;
    }

    private Node parseCallBlock() {
        int line = next().line();
        List<Node.Param> params = current().isOp("(") ? parseSignature() : List.of();
        Expr call = parseExpression(true);
        if (!(call instanceof Expr.Call c)) throw fail("expected call");
        int savedLoops = loopDepth;
        loopDepth = 0;
        List<Node> body = parseStatements(Set.of("endcall"), true);
        loopDepth = savedLoops;
        return new Node.CallBlock(c, macro("caller", params, body, line), line);
    }

    private Node parseFilterBlock() {
        int line = next().line();
        Expr filter = parseFilter(null, true);
        List<Node> body = parseStatements(Set.of("endfilter"), true);
        return new Node.FilterBlock(filter, body, line);
    }

    private Node parseWith() {
        int line = next().line();
        List<Expr> targets = new ArrayList<>();
        List<Expr> values = new ArrayList<>();
        while (!current().is(Type.BLOCK_END)) {
            if (!targets.isEmpty()) expectOp(",");
            targets.add(parseAssignTarget(true, Set.of()));
            expectOp("=");
            values.add(parseExpression(true));
        }
        List<Node> body = parseStatements(Set.of("endwith"), true);
        return new Node.With(targets, values, body, line);
    }

    private Node parseBlock() {
        int line = next().line();
        Token name = expect(Type.NAME, "name");
        skipName("scoped");
        skipName("required");
        List<Node> body = parseStatements(Set.of("endblock"), true);
        if (current().is(Type.NAME)) {
            Token end = next();
            if (!end.text().equals(name.text())) throw fail("mismatching name of block '" + end.text() + "'");
        }
        return new Node.Block(name.text(), body, line);
    }

    /** A name or a (possibly parenthesised) tuple of names. */
    private Expr parseAssignTarget(boolean withTuple, Set<String> extraEnd) {
        Expr target = withTuple ? parseTuple(true, true, extraEnd, false) : parsePrimary();
        checkAssignable(target);
        return target;
    }

    private void checkAssignable(Expr target) {
        if (target instanceof Expr.Name n) {
            if (Set.of("true", "false", "none", "True", "False", "None").contains(n.name())) throw fail("Can't assign to " + n.name());
            return;
        }
        if (target instanceof Expr.TupleLit t) {
            for (Expr e : t.items()) checkAssignable(e);
            return;
        }
        throw fail("can't assign to " + target.getClass().getSimpleName());
    }

    // ---- expressions

    private Expr parseExpression(boolean withCondExpr) {
        return withCondExpr ? parseCondExpr() : parseOr();
    }

    private Expr parseCondExpr() {
        int line = current().line();
        Expr e = parseOr();
        while (skipName("if")) {
            Expr test = parseOr();
            Expr otherwise = skipName("else") ? parseCondExpr() : null;
            e = new Expr.CondExpr(test, e, otherwise, line);
        }
        return e;
    }

    private Expr parseOr() {
        int line = current().line();
        Expr left = parseAnd();
        while (skipName("or")) left = new Expr.Or(left, parseAnd(), line);
        return left;
    }

    private Expr parseAnd() {
        int line = current().line();
        Expr left = parseNot();
        while (skipName("and")) left = new Expr.And(left, parseNot(), line);
        return left;
    }

    private Expr parseNot() {
        if (current().isName("not")) {
            int line = next().line();
            return new Expr.Not(parseNot(), line);
        }
        return parseCompare();
    }

    private static final Set<String> COMPARE_OPS = Set.of("==", "!=", "<", "<=", ">", ">=");

    private Expr parseCompare() {
        int line = current().line();
        Expr first = parseMath1();
        List<String> ops = new ArrayList<>();
        List<Expr> rest = new ArrayList<>();
        while (true) {
            Token t = current();
            if (t.is(Type.OPERATOR) && COMPARE_OPS.contains(t.text())) {
                next();
                ops.add(t.text());
            } else if (t.isName("in")) {
                next();
                ops.add("in");
            } else if (t.isName("not") && look().isName("in")) {
                next();
                next();
                ops.add("notin");
            } else {
                break;
            }
            rest.add(parseMath1());
        }
        return ops.isEmpty() ? first : new Expr.Compare(first, ops, rest, line);
    }

    private Expr parseMath1() {
        int line = current().line();
        Expr left = parseConcat();
        while (current().isOp("+") || current().isOp("-")) {
            String op = next().text();
            left = new Expr.Binary(op, left, parseConcat(), line);
        }
        return left;
    }

    private Expr parseConcat() {
        int line = current().line();
        List<Expr> parts = new ArrayList<>();
        parts.add(parseMath2());
        while (skipOp("~")) parts.add(parseMath2());
        return parts.size() == 1 ? parts.getFirst() : new Expr.Concat(parts, line);
    }

    private Expr parseMath2() {
        int line = current().line();
        Expr left = parsePow();
        while (current().isOp("*") || current().isOp("/") || current().isOp("//") || current().isOp("%")) {
            String op = next().text();
            left = new Expr.Binary(op, left, parsePow(), line);
        }
        return left;
    }

    private Expr parsePow() {
        int line = current().line();
        Expr left = parseUnary(true);
        while (skipOp("**")) left = new Expr.Binary("**", left, parseUnary(true), line);
        return left;
    }

    private void enterNesting() {
        if (++nesting > MAX_NESTING) throw new TemplateException(Kind.LimitExceeded, "template nested more than " + MAX_NESTING + " levels deep", current().line());
    }

    private Expr parseUnary(boolean withFilter) {
        enterNesting();
        try {
            return parseUnaryInner(withFilter);
        } finally {
            nesting--;
        }
    }

    private Expr parseUnaryInner(boolean withFilter) {
        Token t = current();
        Expr node;
        if (t.isOp("-") || t.isOp("+")) {
            next();
            node = new Expr.Unary(t.text(), parseUnary(false), t.line());
        } else {
            node = parsePrimary();
        }
        node = parsePostfix(node);
        if (withFilter) node = parseFilterExpr(node);
        return node;
    }

    private Expr parsePrimary() {
        Token t = current();
        switch (t.type()) {
            case NAME -> {
                next();
                return switch (t.text()) {
                    case "true", "True" -> new Expr.Const(Boolean.TRUE, t.line());
                    case "false", "False" -> new Expr.Const(Boolean.FALSE, t.line());
                    case "none", "None" -> new Expr.Const(null, t.line());
                    default -> new Expr.Name(t.text(), t.line());
                };
            }
            case STRING -> {
                next();
                StringBuilder b = new StringBuilder((String) t.value());
                while (current().is(Type.STRING)) b.append((String) next().value());
                return new Expr.Const(b.toString(), t.line());
            }
            case INTEGER, FLOAT -> {
                next();
                return new Expr.Const(t.value(), t.line());
            }
            case OPERATOR -> {
                if (t.isOp("(")) {
                    next();
                    Expr e = parseTuple(false, true, Set.of(), true);
                    expectOp(")");
                    return e;
                }
                if (t.isOp("[")) return parseList();
                if (t.isOp("{")) return parseDict();
                throw fail("unexpected '" + t.describe() + "'");
            }
            case EOF -> throw fail("unexpected end of template, expected an expression");
            default -> throw fail("unexpected '" + t.describe() + "'");
        }
    }

    /**
     * jinja2's {@code parse_tuple}: comma-separated expressions become a tuple; a single one stays
     * itself. simplified = primaries only (assignment targets).
     */
    private Expr parseTuple(boolean simplified, boolean withCondExpr, Set<String> extraEnd, boolean explicitParens) {
        int line = current().line();
        List<Expr> items = new ArrayList<>();
        boolean isTuple = false;
        while (true) {
            if (!items.isEmpty()) expectOp(",");
            if (isTupleEnd(extraEnd)) break;
            items.add(simplified ? parsePrimary() : parseExpression(withCondExpr));
            if (current().isOp(",")) isTuple = true;
            else break;
        }
        if (!isTuple) {
            if (!items.isEmpty()) return items.getFirst();
            if (!explicitParens) throw fail("Expected an expression, got '" + current().describe() + "'");
        }
        return new Expr.TupleLit(items, line);
    }

    private boolean isTupleEnd(Set<String> extraEnd) {
        Token t = current();
        if (t.is(Type.VARIABLE_END) || t.is(Type.BLOCK_END) || t.isOp(")")) return true;
        return t.is(Type.NAME) && extraEnd.contains(t.text());
    }

    private Expr parseList() {
        int line = expectOp("[").line();
        List<Expr> items = new ArrayList<>();
        while (!current().isOp("]")) {
            if (!items.isEmpty()) expectOp(",");
            if (current().isOp("]")) break;
            items.add(parseExpression(true));
        }
        expectOp("]");
        return new Expr.ListLit(items, line);
    }

    private Expr parseDict() {
        int line = expectOp("{").line();
        List<Expr> keys = new ArrayList<>();
        List<Expr> values = new ArrayList<>();
        while (!current().isOp("}")) {
            if (!keys.isEmpty()) expectOp(",");
            if (current().isOp("}")) break;
            keys.add(parseExpression(true));
            expectOp(":");
            values.add(parseExpression(true));
        }
        expectOp("}");
        return new Expr.DictLit(keys, values, line);
    }

    private Expr parsePostfix(Expr node) {
        while (true) {
            if (current().isOp(".") || current().isOp("[")) node = parseSubscript(node);
            else if (current().isOp("(")) node = new Expr.Call(node, parseCallArgs(), current().line());
            else return node;
        }
    }

    private Expr parseFilterExpr(Expr node) {
        while (true) {
            if (current().isOp("|")) node = parseFilter(node, false);
            else if (current().isName("is")) node = parseTest(node);
            else if (current().isOp("(")) node = new Expr.Call(node, parseCallArgs(), current().line());
            else return node;
        }
    }

    private Expr parseSubscript(Expr node) {
        Token t = next();
        if (t.isOp(".")) {
            Token attr = next();
            if (attr.is(Type.NAME)) return new Expr.GetAttr(node, attr.text(), t.line());
            if (attr.is(Type.INTEGER)) return new Expr.GetItem(node, new Expr.Const(attr.value(), attr.line()), t.line());
            throw new TemplateException(Kind.TemplateSyntaxError, "expected name or number", attr.line());
        }
        List<Expr> args = new ArrayList<>();
        while (!current().isOp("]")) {
            if (!args.isEmpty()) expectOp(",");
            args.add(parseSubscribed());
        }
        expectOp("]");
        Expr key = args.size() == 1 ? args.getFirst() : new Expr.TupleLit(args, t.line());
        return new Expr.GetItem(node, key, t.line());
    }

    private Expr parseSubscribed() {
        int line = current().line();
        Expr start = null;
        if (current().isOp(":")) {
            next();
        } else {
            Expr e = parseExpression(true);
            if (!current().isOp(":")) return e;
            next();
            start = e;
        }
        Expr stop = null;
        Expr step = null;
        if (!current().isOp(":") && !current().isOp("]") && !current().isOp(",")) stop = parseExpression(true);
        if (current().isOp(":")) {
            next();
            if (!current().isOp("]") && !current().isOp(",")) step = parseExpression(true);
        }
        return new Expr.SliceLit(start, stop, step, line);
    }

    private Expr.Args parseCallArgs() {
        Token open = expectOp("(");
        List<Expr> positional = new ArrayList<>();
        List<Expr.Keyword> keywords = new ArrayList<>();
        Expr starArgs = null;
        Expr starKwargs = null;
        boolean requireComma = false;
        while (!current().isOp(")")) {
            if (requireComma) {
                expectOp(",");
                if (current().isOp(")")) break;
            }
            if (current().isOp("*")) {
                if (starArgs != null || starKwargs != null) throw callSyntax(open);
                next();
                starArgs = parseExpression(true);
            } else if (current().isOp("**")) {
                if (starKwargs != null) throw callSyntax(open);
                next();
                starKwargs = parseExpression(true);
            } else if (current().is(Type.NAME) && look().isOp("=")) {
                if (starKwargs != null) throw callSyntax(open);
                String key = next().text();
                next();
                keywords.add(new Expr.Keyword(key, parseExpression(true)));
            } else {
                if (starArgs != null || starKwargs != null || !keywords.isEmpty()) throw callSyntax(open);
                positional.add(parseExpression(true));
            }
            requireComma = true;
        }
        expectOp(")");
        return new Expr.Args(positional, keywords, starArgs, starKwargs);
    }

    private static TemplateException callSyntax(Token open) {
        return new TemplateException(Kind.TemplateSyntaxError, "invalid syntax for function call expression", open.line());
    }

    private Expr parseFilter(Expr node, boolean startInline) {
        while (current().isOp("|") || startInline) {
            if (!startInline) next();
            Token name = expect(Type.NAME, "name");
            String fname = name.text();
            while (current().isOp(".")) {
                next();
                fname += "." + expect(Type.NAME, "name").text();
            }
            Expr.Args args = current().isOp("(") ? parseCallArgs() : Expr.Args.NONE;
            node = new Expr.Filter(node, fname, args, name.line());
            startInline = false;
        }
        return node;
    }

    private static final Set<Type> TEST_ARG_START = Set.of(Type.NAME, Type.STRING, Type.INTEGER, Type.FLOAT);

    private Expr parseTest(Expr node) {
        Token is = next();
        boolean negated = skipName("not");
        Token name = expect(Type.NAME, "name");
        String tname = name.text();
        while (current().isOp(".")) {
            next();
            tname += "." + expect(Type.NAME, "name").text();
        }
        Expr.Args args;
        Token c = current();
        if (c.isOp("(")) {
            args = parseCallArgs();
        } else if ((TEST_ARG_START.contains(c.type()) || c.isOp("[") || c.isOp("{"))
                && !c.isName("else") && !c.isName("or") && !c.isName("and")) {
            if (c.isName("is")) throw fail("You cannot chain multiple tests with is");
            Expr arg = parsePostfix(parsePrimary());
            args = new Expr.Args(List.of(arg), List.of(), null, null);
        } else {
            args = Expr.Args.NONE;
        }
        Expr test = new Expr.Test(node, tname, args, is.line());
        return negated ? new Expr.Not(test, is.line()) : test;
    }
}
