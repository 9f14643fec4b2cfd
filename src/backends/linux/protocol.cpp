#include "backends/linux/protocol.hpp"

#include <errno.h>
#include <sys/socket.h>

#include <cstring>

#include "backends/linux/wire.hpp"

namespace airlock::linux_backend::protocol {

namespace {
constexpr std::size_t kHeaderBytes = 8 + kSecretBytes;
}  // namespace

std::string encode_header(Op op, std::uint32_t header_flags, std::string_view secret) {
  wire::Writer writer;
  writer.u32(static_cast<std::uint32_t>(op));
  writer.u32(header_flags);
  std::string header = writer.take();
  std::string padded(secret.substr(0, kSecretBytes));
  padded.resize(kSecretBytes, '\0');
  return header + padded;
}

bool split_request(const std::string& bytes, Op& op, std::uint32_t& header_flags,
                   std::string& secret, std::string& body) {
  if (bytes.size() < kHeaderBytes) return false;
  wire::Reader reader(std::string_view(bytes).substr(0, 8));
  op = static_cast<Op>(reader.u32());
  header_flags = reader.u32();
  secret = bytes.substr(8, kSecretBytes);
  body = bytes.substr(kHeaderBytes);
  return reader.finished();
}

bool same_secret(std::string_view a, std::string_view b) noexcept {
  if (a.size() != kSecretBytes || b.size() != kSecretBytes) return false;
  unsigned char difference = 0;
  for (std::size_t i = 0; i < kSecretBytes; ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

std::string encode_exec(const ExecRequest& request) {
  wire::Writer writer;
  writer.strings(request.argv);
  writer.strings(request.env);
  writer.bytes(request.working_directory);
  writer.u32(request.flags);
  writer.i64(request.deadline_ms);
  return writer.take();
}

bool decode_exec(const std::string& body, ExecRequest& request) {
  wire::Reader reader(body);
  request.argv = reader.strings();
  request.env = reader.strings();
  request.working_directory = reader.bytes();
  request.flags = reader.u32();
  request.deadline_ms = reader.i64();
  return reader.finished() && !request.argv.empty();
}

std::string encode_signal(int number) {
  wire::Writer writer;
  writer.u32(static_cast<std::uint32_t>(number));
  return writer.take();
}

bool decode_signal(const std::string& body, int& number) {
  wire::Reader reader(body);
  const std::uint32_t value = reader.u32();
  if (!reader.finished() || value > 64) return false;
  number = static_cast<int>(value);
  return true;
}

std::string encode_reply(const Reply& reply) {
  wire::Writer writer;
  writer.u32(static_cast<std::uint32_t>(reply.kind));
  writer.u32(reply.version);
  writer.u32(static_cast<std::uint32_t>(reply.exit.wait_status));
  writer.u32(reply.exit.flags);
  writer.u32(static_cast<std::uint32_t>(reply.failure.stage));
  writer.u32(static_cast<std::uint32_t>(reply.failure.error_number));
  writer.bytes(reply.message);
  return writer.take();
}

bool decode_reply(const std::string& bytes, Reply& reply) {
  wire::Reader reader(bytes);
  reply.kind = static_cast<ReplyKind>(reader.u32());
  reply.version = reader.u32();
  reply.exit.wait_status = static_cast<std::int32_t>(reader.u32());
  reply.exit.flags = reader.u32();
  reply.failure.stage = static_cast<SpawnStage>(reader.u32());
  reply.failure.error_number = static_cast<std::int32_t>(reader.u32());
  reply.message = reader.bytes();
  return reader.finished();
}

int send_message(int socket, const std::string& bytes, const int* fds, std::size_t fd_count) {
  struct iovec vector {};
  vector.iov_base = const_cast<char*>(bytes.data());
  vector.iov_len = bytes.size();
  struct msghdr message {};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (fd_count > kMaxFds) return EINVAL;
  if (fd_count > 0) {
    std::memset(control, 0, sizeof control);
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
    struct cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
    std::memcpy(CMSG_DATA(header), fds, sizeof(int) * fd_count);
  }
  for (;;) {
    const ssize_t sent = ::sendmsg(socket, &message, MSG_NOSIGNAL);
    if (sent >= 0) return static_cast<std::size_t>(sent) == bytes.size() ? 0 : EMSGSIZE;
    if (errno != EINTR) return errno;
  }
}

long receive_message(int socket, std::string& bytes, std::vector<base::UniqueFd>& fds,
                     std::size_t max_bytes) {
  bytes.resize(max_bytes);
  struct iovec vector {};
  vector.iov_base = bytes.data();
  vector.iov_len = bytes.size();
  struct msghdr message {};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ssize_t received;
  do {
    received = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (received < 0 && errno == EINTR);
  if (received < 0) {
    bytes.clear();
    return -errno;
  }
  fds.clear();
  for (struct cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if ((message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    fds.clear();
    bytes.clear();
    return -EMSGSIZE;
  }
  bytes.resize(static_cast<std::size_t>(received));
  return received;
}

}  // namespace airlock::linux_backend::protocol
