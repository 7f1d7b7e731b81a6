// archive.cpp -- a TorchScript archive checked before libtorch reads it (trs::check_archive). libtorch 1.13's
// reader crashes (SIGSEGV, heap corruption) on some malformed archives -- found by fuzzing the loading path
// (tests/fuzz/torchscript_archive.c): pickles whose opcodes pop more than the stack holds (data.pkl,
// constants.pkl), class bodies in the code with a class attribute assigned without a type
// (torch::jit::ScriptTypeParser::parseClassConstant dereferences the missing type), and .debug_pkl source maps
// that do not match their code (read lazily, to quote the Python source in an error message). What can be told
// from the bytes is checked here, and refused with the file and the entry named:
//  - the zip: the end-of-central-directory record, every central-directory entry and local header inside the file,
//    methods stored or deflated, sizes that agree, the CRC-32 of each entry;
//  - every pickle (*.pkl): known opcodes whose arguments fit, a stack that never pops past its top or across a
//    MARK, memo reads of written slots only, one object left at STOP;
//  - every code file (code/**.py): each top-level class's assignments are typed (`name : T = v`) but for the
//    special ones the exporter writes (__parameters__, __buffers__, __annotations__[...] ...).
// libtorch then loads the archive rebuilt without its source maps (error messages quote the TorchScript code, not
// the Python it was scripted from). Archives that need zip64 (4 GiB and more) are left to libtorch as they are. A
// TorchScript archive is code: passing these checks does not make it safe to load (docs/model_archives.md).
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "internal.hpp"

namespace {

uint32_t le16(const unsigned char *p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
uint32_t le32(const unsigned char *p) { return le16(p) | le16(p + 2) << 16; }
uint64_t le64(const unsigned char *p) { return uint64_t(le32(p)) | uint64_t(le32(p + 4)) << 32; }

[[noreturn]] void refuse(const std::string &file, const std::string &what)
{
    throw trs::invalid(file + ": not a TorchScript archive this trainrun can load safely: " + what);
}

// ------------------------------------------------------------------------------------------------ pickles

// A pickle's opcodes simulated on a stack of items and marks (as Python's pickletools does): "" or what is wrong.
std::string check_pickle(const unsigned char *p, size_t n)
{
    std::vector<char> stack; // 'i' an item, 'm' a mark
    std::set<uint64_t> memo;
    auto err = [](size_t at, const std::string &what) { return "byte " + std::to_string(at) + ": " + what; };
    size_t at = 0;
    // pop k items above the last mark (never the mark itself)
    auto pop = [&](size_t k) -> bool {
        size_t items = 0;
        for (size_t i = stack.size(); i > 0 && stack[i - 1] == 'i'; i--) items++;
        if (items < k) return false;
        stack.resize(stack.size() - k);
        return true;
    };
    // pop everything down to and including the last mark
    auto pop_mark = [&]() -> bool {
        while (!stack.empty() && stack.back() == 'i') stack.pop_back();
        if (stack.empty()) return false;
        stack.pop_back();
        return true;
    };
    auto need = [&](size_t k) { return n - at >= k; };
    auto line = [&]() -> bool { // an argument up to and including '\n'
        const void *nl = std::memchr(p + at, '\n', n - at);
        if (!nl) return false;
        at = static_cast<const unsigned char *>(nl) - p + 1;
        return true;
    };
    auto scalar = [&](size_t w) -> bool { // a fixed-width argument of w bytes: one item
        if (!need(w)) return false;
        at += w;
        stack.push_back('i');
        return true;
    };
    // A little-endian length of w bytes, then that many bytes: one item. Returns what is wrong, "" when nothing.
    auto counted = [&](size_t w, const char *what) -> std::string {
        if (!need(w)) return "truncated";
        const uint64_t len = w == 1 ? p[at] : w == 4 ? le32(p + at) : le64(p + at);
        at += w;
        if (!need(len)) return what + std::to_string(len) + " bytes past the end";
        at += len;
        stack.push_back('i');
        return "";
    };
    while (at < n) {
        const size_t op_at = at;
        const unsigned char op = p[at++];
        switch (op) {
        case '(': stack.push_back('m'); break; // MARK
        case '.':                              // STOP
            if (stack.size() != 1 || stack[0] != 'i')
                return err(op_at,
                           "STOP with " + std::to_string(stack.size()) + " entries on the stack, not one object");
            return "";
        case '0':
            if (!pop(1)) return err(op_at, "POP of an empty stack");
            break;
        case '1':
            if (!pop_mark()) return err(op_at, "POP_MARK without a MARK");
            break;
        case '2':
            if (!pop(1)) return err(op_at, "DUP of an empty stack");
            stack.push_back('i');
            stack.push_back('i');
            break;
        case 'F':
        case 'I':
        case 'L':
        case 'S':
        case 'V':
        case 'P':
        case 'g': // a line argument
            if (!line()) return err(op_at, "an argument without its newline");
            if (op == 'g') return err(op_at, "GET (a text memo index, which torch.jit.save never writes)");
            stack.push_back('i');
            break;
        case 'c':
        case 'i': // GLOBAL, INST: two lines
            if (!line() || !line()) return err(op_at, "a module and name without their newlines");
            if (op == 'i' && !pop_mark()) return err(op_at, "INST without a MARK");
            stack.push_back('i');
            break;
        case 'K':
        case 0x82: // BININT1, EXT1: a 1-byte argument, one item
            if (!scalar(1)) return err(op_at, "truncated");
            break;
        case 'M':
        case 0x83: // BININT2, EXT2
            if (!scalar(2)) return err(op_at, "truncated");
            break;
        case 'J':
        case 0x84: // BININT, EXT4
            if (!scalar(4)) return err(op_at, "truncated");
            break;
        case 'G': // BINFLOAT
            if (!scalar(8)) return err(op_at, "truncated");
            break;
        case 'N':
        case '}':
        case ']':
        case ')':
        case 0x88:
        case 0x89:
        case 0x8f: stack.push_back('i'); break;
        case 0x80:
            if (!need(1)) return err(op_at, "truncated");
            at += 1;
            break; // PROTO
        case 0x95:
            if (!need(8)) return err(op_at, "truncated");
            at += 8;
            break; // FRAME
        case 'U':
        case 'C':
        case 0x8c: // SHORT_BINSTRING, SHORT_BINBYTES, SHORT_BINUNICODE: a 1-byte length, then the bytes
            if (const std::string why = counted(1, "a string of "); !why.empty()) return err(op_at, why);
            break;
        case 'T':
        case 'X':
        case 'B': // BINSTRING, BINUNICODE, BINBYTES: a 4-byte length
            if (const std::string why = counted(4, "a string of "); !why.empty()) return err(op_at, why);
            break;
        case 0x8d:
        case 0x8e:
        case 0x96: // BINUNICODE8, BINBYTES8, BYTEARRAY8: an 8-byte length
            if (const std::string why = counted(8, "a string of "); !why.empty()) return err(op_at, why);
            break;
        case 0x8a: // LONG1
            if (const std::string why = counted(1, "a long of "); !why.empty()) return err(op_at, why);
            break;
        case 0x8b: // LONG4
            if (const std::string why = counted(4, "a long of "); !why.empty()) return err(op_at, why);
            break;
        case 'h':
        case 'j': { // BINGET, LONG_BINGET
            const size_t w = op == 'h' ? 1 : 4;
            if (!need(w)) return err(op_at, "truncated");
            const uint64_t idx = w == 1 ? p[at] : le32(p + at);
            at += w;
            if (!memo.count(idx)) return err(op_at, "a memo read of slot " + std::to_string(idx) + ", never written");
            stack.push_back('i');
            break;
        }
        case 'p': return err(op_at, "PUT (a text memo index, which torch.jit.save never writes)");
        case 'q':
        case 'r': { // BINPUT, LONG_BINPUT
            const size_t w = op == 'q' ? 1 : 4;
            if (!need(w)) return err(op_at, "truncated");
            const uint64_t idx = w == 1 ? p[at] : le32(p + at);
            at += w;
            if (idx > (uint64_t{1} << 24)) return err(op_at, "a memo slot of " + std::to_string(idx));
            if (stack.empty() || stack.back() != 'i') return err(op_at, "a memo write without an object");
            memo.insert(idx);
            break;
        }
        case 0x94: // MEMOIZE
            if (stack.empty() || stack.back() != 'i') return err(op_at, "a memo write without an object");
            memo.insert(memo.size());
            break;
        case 'Q':
        case 0x98: // one item -> one
            if (!pop(1)) return err(op_at, "an operand missing");
            stack.push_back('i');
            break;
        case 'R':
        case 'b':
        case 0x81:
        case 'a':
        case 0x93: // two items -> one
            if (!pop(2)) return err(op_at, "an operand missing");
            stack.push_back('i');
            break;
        case 's':
        case 0x92: // three items -> one
            if (!pop(3)) return err(op_at, "an operand missing");
            stack.push_back('i');
            break;
        case 0x85:
        case 0x86:
        case 0x87: // TUPLE1..3
            if (!pop(op - 0x84u)) return err(op_at, "a tuple's items missing");
            stack.push_back('i');
            break;
        case 't':
        case 'l':
        case 'd':
        case 0x91:
        case 'o': // from a MARK (OBJ too)
            if (!pop_mark()) return err(op_at, "a collection without its MARK");
            stack.push_back('i');
            break;
        case 'e':
        case 'u':
        case 0x90: // APPENDS, SETITEMS, ADDITEMS
            if (!pop_mark() || !pop(1)) return err(op_at, "items without their MARK and collection");
            stack.push_back('i');
            break;
        case 0x97: stack.push_back('i'); break;
        default:
            return err(
                op_at, "unknown pickle opcode 0x" + [&] {
                    char h[8];
                    std::snprintf(h, sizeof h, "%02x", op);
                    return std::string(h);
                }());
        }
    }
    return "no STOP before the end";
}

// ------------------------------------------------------------------------------------------------ code

// The first top-level '=' of a logical line that is an assignment (not ==, <=, >=, !=, +=, ...): its offset, or
// npos. `typed`: a top-level ':' comes before it (an annotation).
size_t assignment(const std::string &s, bool *typed)
{
    int depth = 0;
    char quote = 0;
    *typed = false;
    for (size_t i = 0; i < s.size(); i++) {
        const char c = s[i];
        if (quote) {
            if (c == '\\') i++;
            else if (c == quote) quote = 0;
            continue;
        }
        if (c == '\'' || c == '"') quote = c;
        else if (c == '(' || c == '[' || c == '{') depth++;
        else if (c == ')' || c == ']' || c == '}') depth--;
        else if (depth == 0 && c == ':') *typed = true;
        else if (depth == 0 && c == '=') {
            const char prev = i ? s[i - 1] : ' ', next = i + 1 < s.size() ? s[i + 1] : ' ';
            if (next == '=' || std::strchr("<>!=+-*/%&|^@", prev)) {
                if (next == '=') i++;
                continue;
            }
            return i;
        }
    }
    return std::string::npos;
}

struct logical_line {
    size_t indent;
    int number; // 1-based physical line it starts on
    std::string text;
};

// Split TorchScript source into logical lines (brackets and strings joined, comments dropped). false when a
// string or bracket never closes: then the source is libtorch's lexer's to refuse.
bool logical_lines(const std::string &src, std::vector<logical_line> &out)
{
    size_t i = 0;
    int line = 1;
    while (i < src.size()) {
        size_t indent = 0;
        while (i < src.size() && (src[i] == ' ' || src[i] == '\t')) indent++, i++;
        logical_line l{indent, line, ""};
        int depth = 0;
        bool done = false;
        while (i < src.size() && !done) {
            const char c = src[i];
            if (c == '#') {
                while (i < src.size() && src[i] != '\n') i++;
                continue;
            }
            if (c == '\'' || c == '"') {
                const bool triple = src.compare(i, 3, std::string(3, c)) == 0;
                const std::string close = triple ? std::string(3, c) : std::string(1, c);
                size_t j = i + close.size();
                while (j < src.size() && src.compare(j, close.size(), close) != 0) {
                    if (src[j] == '\\') j++;
                    else if (src[j] == '\n') {
                        if (!triple) return false;
                        line++;
                    }
                    j++;
                }
                if (j >= src.size()) return false;
                l.text.append(src, i, j + close.size() - i);
                i = j + close.size();
                continue;
            }
            if (c == '\\' && i + 1 < src.size() && src[i + 1] == '\n') {
                i += 2, line++;
                continue;
            }
            if (c == '(' || c == '[' || c == '{') depth++;
            if (c == ')' || c == ']' || c == '}') depth--;
            if (c == '\n') {
                line++;
                i++;
                if (depth <= 0) done = true;
                else l.text += ' ';
                continue;
            }
            l.text += c;
            i++;
        }
        if (depth > 0) return false;
        while (!l.text.empty() && (l.text.back() == ' ' || l.text.back() == '\r')) l.text.pop_back();
        if (!l.text.empty()) out.push_back(std::move(l));
    }
    return true;
}

// "" or the first class-level assignment without a type in a code file.
std::string check_code(const std::string &src)
{
    std::vector<logical_line> lines;
    if (!logical_lines(src, lines)) return "";
    static const char *const special[] = {"__parameters__", "__buffers__", "__annotations__", "__forward_pre_hooks__",
                                          "__forward_hooks__"};
    for (size_t k = 0; k < lines.size(); k++) {
        if (lines[k].indent != 0 || lines[k].text.compare(0, 6, "class ") != 0) continue;
        const std::string cls = lines[k].text;
        size_t body = std::string::npos;
        for (size_t j = k + 1; j < lines.size() && lines[j].indent > 0; j++) {
            if (body == std::string::npos) body = lines[j].indent;
            if (lines[j].indent != body) continue; // inside a method
            const std::string &t = lines[j].text;
            if (t.compare(0, 4, "def ") == 0 || t[0] == '@') continue;
            bool typed = false;
            const size_t eq = assignment(t, &typed);
            if (eq == std::string::npos || typed) continue;
            std::string lhs = t.substr(0, eq);
            while (!lhs.empty() && lhs.back() == ' ') lhs.pop_back();
            bool ok = lhs.compare(0, 16, "__annotations__[") == 0;
            for (const char *s : special) ok = ok || lhs == s;
            if (!ok)
                return "line " + std::to_string(lines[j].number) + ": in " + cls.substr(0, 60) + ", `" +
                       t.substr(0, 60) + "` assigns a class attribute without a type (`" + lhs.substr(0, 40) +
                       " : T = ...`), on which libtorch's importer crashes";
        }
    }
    return "";
}

// ------------------------------------------------------------------------------------------------ zip

struct zip_entry {
    std::string name;
    uint32_t method, crc, csize, usize;
    uint64_t data; // offset of the data in the file
};

bool inflate_raw(const unsigned char *in, size_t n, std::string &out, size_t usize)
{
    out.assign(usize, '\0');
    z_stream s{};
    if (inflateInit2(&s, -15) != Z_OK) return false;
    s.next_in = const_cast<unsigned char *>(in);
    s.avail_in = static_cast<uInt>(n);
    s.next_out = reinterpret_cast<unsigned char *>(&out[0]);
    s.avail_out = static_cast<uInt>(usize);
    const int rc = inflate(&s, Z_FINISH);
    const bool ok = rc == Z_STREAM_END && s.total_out == usize;
    inflateEnd(&s);
    return ok;
}

// The archive rewritten without its .debug_pkl source maps: every other entry's local header and data as they are
// (method, CRC and sizes unchanged), 64-byte aligned as PyTorch's writer aligns them, and a new central directory.
// libtorch reads the source maps only to quote the original Python source in an error message -- lazily, after the
// load -- and a source map that does not match its code crashed it there.
std::string without_source_maps(const unsigned char *z, const std::vector<zip_entry> &entries)
{
    std::string out, cd;
    auto u16 = [](std::string &b, uint32_t v) { b += char(v & 255), b += char((v >> 8) & 255); };
    auto u32 = [&](std::string &b, uint32_t v) { u16(b, v & 0xffff), u16(b, v >> 16); };
    uint32_t count = 0;
    for (const zip_entry &e : entries) {
        if (e.name.size() >= 9 && e.name.compare(e.name.size() - 9, 9, "debug_pkl") == 0) continue;
        const size_t pad = (64 - (out.size() + 30 + e.name.size() + 4) % 64) % 64;
        const uint32_t off = static_cast<uint32_t>(out.size());
        u32(out, 0x04034b50), u16(out, 20), u16(out, 0), u16(out, e.method), u16(out, 0), u16(out, 0x21);
        u32(out, e.crc), u32(out, e.csize), u32(out, e.usize), u16(out, uint32_t(e.name.size()));
        u16(out, uint32_t(pad + 4));
        out += e.name;
        u16(out, 0x4646), u16(out, uint32_t(pad)); /* PyTorch's "FF" padding field */
        out.append(pad, 'Z');
        out.append(reinterpret_cast<const char *>(z + e.data), e.csize);
        u32(cd, 0x02014b50), u16(cd, 20), u16(cd, 20), u16(cd, 0), u16(cd, e.method), u16(cd, 0), u16(cd, 0x21);
        u32(cd, e.crc), u32(cd, e.csize), u32(cd, e.usize), u16(cd, uint32_t(e.name.size())), u16(cd, 0), u16(cd, 0);
        u16(cd, 0), u16(cd, 0), u32(cd, 0), u32(cd, off);
        cd += e.name;
        count++;
    }
    const uint32_t cd_off = static_cast<uint32_t>(out.size());
    out += cd;
    u32(out, 0x06054b50), u16(out, 0), u16(out, 0), u16(out, count), u16(out, count);
    u32(out, uint32_t(cd.size())), u32(out, cd_off), u16(out, 0);
    return out;
}

}  // namespace

std::string trs::check_archive(const std::string &file, const unsigned char *z, size_t n)
{
    if (n < 22) refuse(file, std::to_string(n) + " bytes, too short for a zip");
    size_t eocd = n - 22;
    const size_t lowest = n > 22 + 65535 ? n - 22 - 65535 : 0;
    while (eocd > lowest && le32(z + eocd) != 0x06054b50) eocd--;
    if (le32(z + eocd) != 0x06054b50) refuse(file, "no zip end-of-central-directory record");
    const uint32_t count = le16(z + eocd + 10), cd_size = le32(z + eocd + 12), cd = le32(z + eocd + 16);
    if (count == 0xffff || cd == 0xffffffffu || cd_size == 0xffffffffu) // zip64: libtorch's to read
        return std::string(reinterpret_cast<const char *>(z), n);
    if (uint64_t(cd) + cd_size > eocd) refuse(file, "the central directory lies outside the file");
    std::vector<zip_entry> entries;
    size_t at = cd;
    for (uint32_t i = 0; i < count; i++) {
        if (at + 46 > eocd || le32(z + at) != 0x02014b50)
            refuse(file, "central-directory entry " + std::to_string(i) + " is malformed");
        zip_entry e;
        e.method = le16(z + at + 10);
        e.crc = le32(z + at + 16);
        e.csize = le32(z + at + 20);
        e.usize = le32(z + at + 24);
        const uint32_t nlen = le16(z + at + 28), xlen = le16(z + at + 30), clen = le16(z + at + 32);
        const uint64_t local = le32(z + at + 42);
        if (at + 46 + nlen + xlen + clen > eocd)
            refuse(file, "central-directory entry " + std::to_string(i) + " runs past it");
        e.name.assign(reinterpret_cast<const char *>(z + at + 46), nlen);
        if (e.name.empty() || e.name.find('\0') != std::string::npos)
            refuse(file, "central-directory entry " + std::to_string(i) + " has no usable name");
        if (e.method != 0 && e.method != 8)
            refuse(file,
                   "entry " + e.name + ": compression method " + std::to_string(e.method) + " (stored or deflate)");
        if (local + 30 > n || le32(z + local) != 0x04034b50) refuse(file, "entry " + e.name + ": no local header");
        e.data = local + 30 + le16(z + local + 26) + le16(z + local + 28);
        if (e.data + e.csize > n) refuse(file, "entry " + e.name + ": its data runs past the end of the file");
        if (e.method == 0 && e.csize != e.usize)
            refuse(file, "entry " + e.name + ": stored with " + std::to_string(e.csize) + " bytes but " +
                             std::to_string(e.usize) + " uncompressed");
        entries.push_back(std::move(e));
        at += 46 + nlen + xlen + clen;
    }
    uint64_t total = 0;
    for (const zip_entry &e : entries) total += e.csize + 30 + e.name.size() + 64 + 46 + e.name.size();
    if (total > 0xffffffffu) return std::string(reinterpret_cast<const char *>(z), n); /* needs zip64: left as is */
    for (const zip_entry &e : entries) {
        const bool code = e.name.find("/code/") != std::string::npos && e.name.size() > 3 &&
                          e.name.compare(e.name.size() - 3, 3, ".py") == 0;
        const bool source_map = e.name.size() >= 9 && e.name.compare(e.name.size() - 9, 9, "debug_pkl") == 0;
        const bool pickle = !source_map && e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".pkl") == 0;
        const unsigned char *raw = z + e.data;
        std::string inflated;
        if (e.method == 8) {
            if (e.usize > (uint32_t{1} << 30)) refuse(file, "entry " + e.name + ": over 1 GiB uncompressed");
            if (!inflate_raw(raw, e.csize, inflated, e.usize))
                refuse(file, "entry " + e.name + ": corrupt deflate data");
            raw = reinterpret_cast<const unsigned char *>(inflated.data());
        }
        if (uint32_t(crc32(0, raw, e.usize)) != e.crc)
            refuse(file, "entry " + e.name + ": CRC-32 mismatch (corrupted)");
        if (pickle) {
            const std::string why = check_pickle(raw, e.usize);
            if (!why.empty()) refuse(file, "entry " + e.name + ": a malformed pickle: " + why);
        }
        if (code) {
            const std::string why = check_code(std::string(reinterpret_cast<const char *>(raw), e.usize));
            if (!why.empty()) refuse(file, "entry " + e.name + ": " + why);
        }
    }
    return without_source_maps(z, entries);
}
