// An HTTPS server on the JDK's own TLS stack (JSSE, in Java: the JVM maps no TLS library):
// com.sun.net.httpserver.HttpsServer on 127.0.0.1:PORT, answering every request with a small
// body and "Connection: close". The key and certificate come in a PKCS12 keystore.
// usage: java JsseServer PORT KEYSTORE.p12 PASSWORD
import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsServer;
import java.io.FileInputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.security.KeyStore;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;

public class JsseServer {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        char[] password = args[2].toCharArray();
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (FileInputStream in = new FileInputStream(args[1])) {
            ks.load(in, password);
        }
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, password);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(kmf.getKeyManagers(), null, null);
        HttpsServer server = HttpsServer.create(new InetSocketAddress("127.0.0.1", port), 128);
        server.setHttpsConfigurator(new HttpsConfigurator(ctx));
        byte[] body = "hello from jsse\n".getBytes("US-ASCII");
        server.createContext("/", exchange -> {
            exchange.getResponseHeaders().set("Connection", "close");
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
        });
        server.start();
        System.out.println("serving on " + port);
    }
}
