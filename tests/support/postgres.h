// Test fixture: a real PostgreSQL 15 server of the test's own, on a free loopback port, and a
// small synchronous SQL client. Failures throw std::runtime_error (Catch reports the message).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace tidemark::test {

/// Operation: initdb (trust authentication, UTF-8) in a fresh directory under /tmp owned by
/// the `postgres` user when the test runs as root (initdb and postgres refuse root: the child
/// drops to that user before exec), then the postmaster in the foreground as a child process
/// on a port that was free, listening on 127.0.0.1 only, its socket in the same directory; it
/// dies with the test (PR_SET_PDEATHSIG), so a crashed test leaves no server behind. A role
/// and a database, both `tidemark`, as docs/SINK.md's setup makes them.
/// Limits: `durable = false` (the default, for tests) runs with fsync off: a clean stop()
/// keeps everything, kill9() may lose the last commits as a power cut would (the benchmarks
/// keep fsync on).
class Postgres {
  public:
    struct Options {
        bool durable = false;
        std::string extra_conf;  ///< lines appended to postgresql.conf
    };

    static Postgres start(Options options);
    static Postgres start() { return start(Options{}); }
    ~Postgres();
    Postgres(Postgres&& other) noexcept;
    Postgres& operator=(Postgres&&) = delete;
    Postgres(const Postgres&) = delete;
    Postgres& operator=(const Postgres&) = delete;

    int port() const { return port_; }
    /// libpq's conninfo for the `tidemark` role and database.
    std::string conninfo(const std::string& database = "tidemark") const;
    bool running() const { return pid_ > 0; }

    void stop();         ///< fast shutdown (SIGINT), waits; a checkpoint keeps everything
    void kill9();        ///< SIGKILL of the postmaster, waits until its backends are gone
    void restart();      ///< stop() then start again: same port and data
    void start_again();  ///< after stop() or kill9()
    std::string log() const;

    /// Runs `sql` (one statement, or several without results) as the superuser on
    /// `database`; the rows, NULL as nullopt. Throws with PostgreSQL's message on an error.
    std::vector<std::vector<std::optional<std::string>>> query(
        const std::string& sql, const std::string& database = "tidemark") const;
    /// The first column of the first row as text ("" when NULL or no row).
    std::string scalar(const std::string& sql, const std::string& database = "tidemark") const;

  private:
    Postgres() = default;
    void launch();
    Options options_;
    std::string dir_;
    int port_ = 0;
    pid_t pid_ = -1;
};

}  // namespace tidemark::test
