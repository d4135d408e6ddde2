#include "tests/support/postgres.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/broker.h"

namespace tidemark::test {

namespace {

constexpr const char* bin_dir = "/usr/lib/postgresql/15/bin";
// The machine may be loaded (several test programs at once): generous, never hit when healthy.
constexpr auto ready_timeout = std::chrono::seconds(60);
constexpr auto stop_timeout = std::chrono::seconds(30);
constexpr int port_attempts_max = 5;

[[noreturn]] void throw_errno(const std::string& what) {
    throw std::runtime_error(what + ": " + std::strerror(errno));
}

// The user a server runs as: `postgres` when we are root (it refuses root), else ourselves.
struct RunAs {
    bool switch_user = false;
    uid_t uid = 0;
    gid_t gid = 0;
};

RunAs run_as() {
    RunAs r;
    if (::geteuid() != 0) return r;
    const passwd* pw = ::getpwnam("postgres");
    if (pw == nullptr)
        throw std::runtime_error(
            "running as root and there is no user 'postgres' to run "
            "PostgreSQL as: apt-get install postgresql-15");
    r.switch_user = true;
    r.uid = pw->pw_uid;
    r.gid = pw->pw_gid;
    return r;
}

// fork + exec of `argv` as run_as(), output appended to `log_path`. With `die_with_us`, the
// child gets SIGQUIT (PostgreSQL's immediate shutdown) when the test process goes.
pid_t spawn(const std::vector<std::string>& args, const std::string& log_path, bool die_with_us) {
    const RunAs as = run_as();
    std::vector<std::string> text = args;
    std::vector<char*> argv;
    for (auto& a : text)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw_errno("fork");
    if (pid == 0) {
        const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            ::dup2(fd, STDOUT_FILENO);
            ::dup2(fd, STDERR_FILENO);
            ::close(fd);
        }
        if (as.switch_user &&
            (::setgroups(0, nullptr) != 0 || ::setgid(as.gid) != 0 || ::setuid(as.uid) != 0))
            ::_exit(126);
        // After setuid: a change of credentials clears the parent-death signal.
        if (die_with_us) {
            ::prctl(PR_SET_PDEATHSIG, SIGQUIT);
            if (::getppid() != parent) ::_exit(125);
        }
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    return pid;
}

// Waits up to `timeout` for `pid`; its status, or -1 when it still runs.
int reap(pid_t pid, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        int status = 0;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0 && errno == ECHILD) return 0;
        if (std::chrono::steady_clock::now() >= deadline) return -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

Postgres Postgres::start(Options options) {
    Postgres pg;
    pg.options_ = std::move(options);
    pg.dir_ = temp_dir("tidemark-pg");
    const RunAs as = run_as();
    if (as.switch_user && ::chown(pg.dir_.c_str(), as.uid, as.gid) != 0)
        throw_errno("chown " + pg.dir_);
    const std::string data = pg.dir_ + "/data";
    const pid_t initdb = spawn({std::string(bin_dir) + "/initdb", "-D", data, "-A", "trust", "-U",
                                "postgres", "-E", "UTF8", "--no-sync", "--no-instructions"},
                               pg.dir_ + "/initdb.log", false);
    if (const int status = reap(initdb, std::chrono::seconds(120)); status != 0)
        throw std::runtime_error("initdb failed (" + std::to_string(status) +
                                 "): " + read_text(pg.dir_ + "/initdb.log"));
    {
        std::ofstream conf(data + "/postgresql.conf", std::ios::app);
        conf << "\n# tests/support/postgres.cpp\n"
             << "listen_addresses = '127.0.0.1'\n"
             << "unix_socket_directories = '" << pg.dir_ << "'\n"
             << "max_connections = 40\nshared_buffers = 32MB\n"
             << "logging_collector = off\nlog_min_messages = warning\n";
        if (!pg.options_.durable) conf << "fsync = off\nfull_page_writes = off\n";
        conf << pg.options_.extra_conf << "\n";
    }
    std::string last_error;
    for (int attempt = 0; attempt < port_attempts_max; ++attempt) {
        pg.port_ = free_loopback_port();
        try {
            pg.launch();
            last_error.clear();
            break;
        } catch (const std::exception& e) {
            last_error = e.what();  // most likely the port was taken meanwhile
        }
    }
    if (!last_error.empty()) throw std::runtime_error("PostgreSQL did not start: " + last_error);
    pg.query("CREATE ROLE tidemark LOGIN", "postgres");
    pg.query("CREATE DATABASE tidemark OWNER tidemark ENCODING 'UTF8' TEMPLATE template0",
             "postgres");
    return pg;
}

void Postgres::launch() {
    pid_ = spawn(
        {std::string(bin_dir) + "/postgres", "-D", dir_ + "/data", "-p", std::to_string(port_)},
        dir_ + "/postgres.log", true);
    const std::string ping =
        "host=127.0.0.1 port=" + std::to_string(port_) + " dbname=postgres user=postgres";
    const auto deadline = std::chrono::steady_clock::now() + ready_timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (reap(pid_, std::chrono::milliseconds(0)) >= 0) {
            pid_ = -1;
            throw std::runtime_error("postgres exited on port " + std::to_string(port_) + ": " +
                                     log());
        }
        if (PQping(ping.c_str()) == PQPING_OK) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid_, SIGQUIT);
    reap(pid_, stop_timeout);
    pid_ = -1;
    throw std::runtime_error("postgres did not accept connections on port " +
                             std::to_string(port_) + ": " + log());
}

Postgres::~Postgres() {
    if (pid_ > 0) {
        ::kill(pid_, SIGQUIT);  // immediate: the data goes with the directory anyway
        reap(pid_, stop_timeout);
    }
    if (!dir_.empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(dir_, ignored);
    }
}

Postgres::Postgres(Postgres&& other) noexcept
    : options_(std::move(other.options_)),
      dir_(std::move(other.dir_)),
      port_(other.port_),
      pid_(other.pid_) {
    other.dir_.clear();
    other.pid_ = -1;
}

std::string Postgres::conninfo(const std::string& database) const {
    return "host=127.0.0.1 port=" + std::to_string(port_) + " dbname=" + database +
           " user=tidemark";
}

void Postgres::stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGINT);  // fast shutdown: sessions end, a checkpoint is written
    if (reap(pid_, stop_timeout) < 0) {
        ::kill(pid_, SIGQUIT);
        reap(pid_, stop_timeout);
    }
    pid_ = -1;
}

void Postgres::kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    reap(pid_, stop_timeout);
    pid_ = -1;
}

void Postgres::start_again() {
    if (pid_ > 0) return;
    // After a SIGKILL the backends may take a moment to notice; postgres refuses to start
    // while they hold the shared memory, so try for a while.
    const auto deadline = std::chrono::steady_clock::now() + ready_timeout;
    while (true) {
        try {
            launch();
            return;
        } catch (const std::exception&) {
            if (std::chrono::steady_clock::now() >= deadline) throw;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
}

void Postgres::restart() {
    stop();
    start_again();
}

std::string Postgres::log() const {
    return read_text(dir_ + "/postgres.log");
}

std::vector<std::vector<std::optional<std::string>>> Postgres::query(
    const std::string& sql, const std::string& database) const {
    const std::string info =
        "host=127.0.0.1 port=" + std::to_string(port_) + " dbname=" + database + " user=postgres";
    PGconn* conn = PQconnectdb(info.c_str());
    if (PQstatus(conn) != CONNECTION_OK) {
        std::string message = PQerrorMessage(conn);
        PQfinish(conn);
        throw std::runtime_error("cannot connect to the test PostgreSQL: " + message);
    }
    PGresult* r = PQexec(conn, sql.c_str());
    const ExecStatusType status = PQresultStatus(r);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        std::string message = PQresultErrorMessage(r);
        PQclear(r);
        PQfinish(conn);
        throw std::runtime_error("SQL failed: " + message + "in: " + sql);
    }
    std::vector<std::vector<std::optional<std::string>>> rows;
    for (int i = 0; i < PQntuples(r); ++i) {
        auto& row = rows.emplace_back();
        for (int j = 0; j < PQnfields(r); ++j) {
            if (PQgetisnull(r, i, j))
                row.emplace_back(std::nullopt);
            else
                row.emplace_back(std::string(PQgetvalue(r, i, j)));
        }
    }
    PQclear(r);
    PQfinish(conn);
    return rows;
}

std::string Postgres::scalar(const std::string& sql, const std::string& database) const {
    const auto rows = query(sql, database);
    if (rows.empty() || rows[0].empty() || !rows[0][0]) return "";
    return *rows[0][0];
}

}  // namespace tidemark::test
