// shapes: a small inventory manager. Reads commands (one per line) from the
// file named on the command line, or from stdin when no file (or "-") is
// given, and maintains an Inventory of Items.
#include <cctype>
#include <fstream>
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

// Lower-case a name and strip surrounding whitespace.
std::string normalize(const std::string &s)
{
    std::size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
        ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
        --e;
    std::string out;
    out.reserve(e - b);
    for (std::size_t i = b; i < e; ++i)
        out += static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    return out;
}

std::string formatMoney(double v)
{
    std::ostringstream os;
    os << std::fixed << std::setprecision(2) << v;
    return os.str();
}

class Item {
public:
    Item(std::string name, int qty, double price)
        : name_(normalize(name)), qty_(qty), price_(price) {}
    virtual ~Item() = default;

    const std::string &name() const { return name_; }
    int qty() const { return qty_; }
    double price() const { return price_; }
    // Change the quantity, saturating at a large bound (no int overflow).
    void adjust(int delta)
    {
        long long q = static_cast<long long>(qty_) + delta;
        qty_ = static_cast<int>(std::min(q, 1000000000LL));
    }

    // Value of the stock held; overridden by specialised items.
    virtual double value() const { return qty_ * price_; }
    virtual std::string describe() const
    {
        return name_ + " x" + std::to_string(qty_) + " @ " + formatMoney(price_);
    }

    static bool validName(const std::string &n)
    {
        if (n.empty() || n.size() > 32)
            return false;
        for (char c : n)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
                return false;
        return true;
    }

protected:
    std::string name_;
    int qty_;
    double price_;
};

class Perishable : public Item {
public:
    Perishable(std::string name, int qty, double price, int days)
        : Item(std::move(name), qty, price), days_(days) {}

    // Items close to expiry are valued at half price.
    double value() const override
    {
        double v = Item::value();
        return days_ <= 2 ? v / 2 : v;
    }
    std::string describe() const override
    {
        return Item::describe() + " (expires in " + std::to_string(days_) + "d)";
    }

private:
    int days_;
};

class Inventory {
public:
    explicit Inventory(std::string owner) : owner_(std::move(owner)) {}

    void setOwner(const std::string &o) { owner_ = o; }

    void add(std::unique_ptr<Item> item)
    {
        if (Item *existing = find(item->name())) {
            existing->adjust(item->qty());
            return;
        }
        items_.push_back(std::move(item));
    }

    bool remove(const std::string &name, int qty)
    {
        Item *it = find(name);
        if (!it || it->qty() < qty)
            return false;
        it->adjust(-qty);
        return true;
    }

    Item *find(const std::string &name)
    {
        std::string key = normalize(name);
        for (auto &p : items_)
            if (p->name() == key)
                return p.get();
        return nullptr;
    }

    double total() const
    {
        double t = 0;
        for (const auto &p : items_)
            t += p->value();
        return t;
    }

    void report(std::ostream &os) const
    {
        os << "inventory of " << owner_ << ": " << items_.size() << " item(s)\n";
        for (const auto &p : items_)
            os << "  " << p->describe() << " = " << formatMoney(p->value()) << "\n";
        os << "  total " << formatMoney(total()) << "\n";
    }

private:
    std::vector<std::unique_ptr<Item>> items_;
    std::string owner_;
};

// Parse "name qty price" (and optionally days) from a command's arguments.
static bool parseItem(std::istringstream &in, std::string &name, int &qty, double &price)
{
    if (!(in >> name >> qty >> price))
        return false;
    return Item::validName(name) && qty >= 0 && qty <= 1000000 && price >= 0 &&
           price <= 1e6;
}

static void runCommand(Inventory &inv, const std::string &line)
{
    std::istringstream in(line);
    std::string cmd;
    if (!(in >> cmd) || cmd[0] == '#')
        return;
    std::string name;
    int qty = 0;
    double price = 0;
    if (cmd == "owner") {
        std::string rest;
        std::getline(in >> std::ws, rest);
        inv.setOwner(rest);
    } else if (cmd == "add") {
        if (parseItem(in, name, qty, price))
            inv.add(std::make_unique<Item>(name, qty, price));
        else
            std::cout << "bad add: " << line << "\n";
    } else if (cmd == "perishable") {
        int days = 0;
        if (parseItem(in, name, qty, price) && (in >> days) && days >= 0)
            inv.add(std::make_unique<Perishable>(name, qty, price, days));
        else
            std::cout << "bad perishable: " << line << "\n";
    } else if (cmd == "remove") {
        if (in >> name >> qty && qty >= 0 && inv.remove(name, qty))
            std::cout << "removed " << qty << " " << normalize(name) << "\n";
        else
            std::cout << "cannot remove: " << line << "\n";
    } else if (cmd == "find") {
        in >> name;
        if (const Item *it = inv.find(name))
            std::cout << "found " << it->describe() << ", unit price "
                      << formatMoney(it->price()) << "\n";
        else
            std::cout << "no " << normalize(name) << "\n";
    } else if (cmd == "total") {
        std::cout << "total " << formatMoney(inv.total()) << "\n";
    } else if (cmd == "report") {
        inv.report(std::cout);
    } else {
        std::cout << "unknown command " << cmd << "\n";
    }
}

int main(int argc, char **argv)
{
    Inventory inv("nobody");
    std::ifstream file;
    std::istream *in = &std::cin;
    if (argc > 1 && std::string(argv[1]) != "-") {
        file.open(argv[1]);
        if (!file) {
            std::cerr << "cannot open " << argv[1] << "\n";
            return 1;
        }
        in = &file;
    }
    std::string line;
    while (std::getline(*in, line))
        runCommand(inv, line);
    return 0;
}
