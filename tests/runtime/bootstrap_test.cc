// Bootstraps from launcher environments (runtime/launch/bootstrap.h): which variables win, what a
// malformed one says, HOST:PORT and the shared secret.
#include "runtime/launch/bootstrap.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>

namespace slowpipe::runtime {
namespace {

EnvLookup envOf(const std::map<std::string, std::string>& vars) {
  auto copy = std::make_shared<std::map<std::string, std::string>>(vars);
  return [copy](const char* name) -> const char* {
    const auto it = copy->find(name);
    return it == copy->end() ? nullptr : it->second.c_str();
  };
}

std::string errorOf(const std::map<std::string, std::string>& vars) {
  try {
    bootstrapFromEnv(envOf(vars));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(BootstrapTest, EachLauncherIsReadFromItsVariables) {
  EXPECT_FALSE(bootstrapFromEnv(envOf({})).has_value());
  auto b = bootstrapFromEnv(envOf({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->source, "openmpi");
  EXPECT_EQ(b->rank, 2);
  EXPECT_EQ(b->size, 4);
  b = bootstrapFromEnv(envOf({{"PMIX_RANK", "1"}, {"SLURM_NTASKS", "3"}}));
  EXPECT_EQ(b->source, "pmix");
  EXPECT_EQ(b->size, 3);
  b = bootstrapFromEnv(envOf({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}));
  EXPECT_EQ(b->source, "pmi");
  b = bootstrapFromEnv(envOf({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}}));
  EXPECT_EQ(b->source, "slurm");
  EXPECT_EQ(b->rank, 5);
  b = bootstrapFromEnv(envOf(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(b->source, "torchrun");
  EXPECT_EQ(b->masterAddr, "10.0.0.1");
  EXPECT_EQ(b->masterPort, 29500);
  // mpirun inside a Slurm allocation: the process's own launcher (OpenMPI) wins over the job's.
  b = bootstrapFromEnv(envOf({{"OMPI_COMM_WORLD_RANK", "1"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"SLURM_PROCID", "0"},
                              {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(b->source, "openmpi");
  EXPECT_EQ(b->rank, 1);
}

TEST(BootstrapTest, MalformedVariablesAreNamed) {
  EXPECT_EQ(errorOf({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
            "environment: RANK='x' is not an integer");
  EXPECT_EQ(errorOf({{"RANK", "2"}, {"WORLD_SIZE", "2"}}),
            "environment: RANK=2 is not below WORLD_SIZE=2");
  EXPECT_EQ(
      errorOf({{"PMIX_RANK", "0"}}),
      "environment: PMIX_RANK is set (pmix) but not PMI_SIZE or SLURM_NTASKS (the world size)");
  EXPECT_EQ(errorOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}),
            "environment: SLURM_NTASKS=0 is out of range; expected 1..1048576");
  EXPECT_EQ(errorOf({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}}),
            "environment: MASTER_PORT=70000 is out of range; expected 1..65535");
}

TEST(BootstrapTest, HostPortAndSecret) {
  EXPECT_EQ(parseHostPort("10.1.2.3:29500", "--rendezvous"),
            (std::pair<std::string, int>{"10.1.2.3", 29500}));
  EXPECT_EQ(parseHostPort("node-7:80", "x").first, "node-7");
  for (const char* bad : {"10.1.2.3", ":80", "host:", "host:0", "host:http", "a b:80"})
    EXPECT_THROW(parseHostPort(bad, "--rendezvous"), std::invalid_argument) << bad;
  try {
    loadSecret(envOf({}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("set SLOWPIPE_SECRET_FILE"), std::string::npos);
  }
  const auto file =
      std::filesystem::temp_directory_path() / ("slowpipe-secret-test-" + std::to_string(getpid()));
  std::ofstream(file) << "short\n";
  try {
    loadSecret(envOf({{"SLOWPIPE_SECRET_FILE", file.string()}}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "SLOWPIPE_SECRET_FILE '" + file.string() +
                                         "' holds 5 bytes; a secret needs at least 16");
  }
  std::ofstream(file) << "0123456789abcdef0123\n";
  EXPECT_EQ(loadSecret(envOf({{"SLOWPIPE_SECRET_FILE", file.string()}})), "0123456789abcdef0123");
  std::filesystem::remove(file);
  EXPECT_THROW(loadSecret(envOf({{"SLOWPIPE_SECRET_FILE", file.string()}})), std::invalid_argument);
}

std::string secretError(const std::string& path) {
  try {
    loadSecret(envOf({{"SLOWPIPE_SECRET_FILE", path}}));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// A FIFO must not block for ever (it did: the reader waited for a writer), a directory is not
// "0 bytes", and a file others can read draws a warning.
TEST(BootstrapTest, SecretFileMustBeAPrivateRegularFile) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("slowpipe-secret-kinds-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto pending = std::async(std::launch::async, [&] { return secretError(fifo); });
  if (pending.wait_for(std::chrono::seconds(3)) != std::future_status::ready) {
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // unblock the reader, then fail
    if (fd >= 0) close(fd);
    pending.wait();
    FAIL() << "reading a FIFO as the secret file blocked";
  }
  EXPECT_NE(pending.get().find("is a FIFO; expected a regular file"), std::string::npos);
  EXPECT_NE(secretError(dir.string()).find("is a directory; expected a regular file"),
            std::string::npos);
  const auto file = dir / "secret";
  std::ofstream(file) << "0123456789abcdef0123\n";
  std::filesystem::permissions(file, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::owner_write |
                                         std::filesystem::perms::others_read);
  testing::internal::CaptureStderr();
  EXPECT_EQ(loadSecret(envOf({{"SLOWPIPE_SECRET_FILE", file.string()}})), "0123456789abcdef0123");
  EXPECT_NE(testing::internal::GetCapturedStderr().find("is accessible to others (mode 604)"),
            std::string::npos);
  std::filesystem::permissions(
      file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  testing::internal::CaptureStderr();
  loadSecret(envOf({{"SLOWPIPE_SECRET_FILE", file.string()}}));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace slowpipe::runtime
