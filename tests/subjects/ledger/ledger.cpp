#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>
struct Bad : std::runtime_error { int where; Bad(const std::string &m, int w) : std::runtime_error(m), where(w) {} };
static int parse_qty(const std::string &s) {
    if (s.empty()) throw Bad("empty quantity", 0);
    int v = 0;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] < '0' || s[i] > '9') throw Bad("not a digit in " + s, (int)i);
        v = v * 10 + (s[i] - '0');
    }
    return v;
}
struct Ledger {
    std::map<std::string, int> qty;
    std::vector<std::string> log;
    virtual ~Ledger() {}
    virtual void add(const std::string &name, const std::string &q) {
        int n = parse_qty(q);   // throws through add
        qty[name] += n;
        log.push_back(name);
    }
};
static int apply(Ledger &l, const std::string &name, const std::string &q) {
    try {
        l.add(name, q);
        return 0;
    } catch (const Bad &e) {
        std::printf("error at %d: %s\n", e.where, e.what());
        return 1;
    }
}
int main(int argc, char **argv) {
    Ledger l;
    int errors = 0;
    for (int i = 1; i + 1 < argc; i += 2) errors += apply(l, argv[i], argv[i + 1]);
    for (auto &kv : l.qty) std::printf("%s %d\n", kv.first.c_str(), kv.second);
    std::printf("%d error(s)\n", errors);
    return 0;
}
